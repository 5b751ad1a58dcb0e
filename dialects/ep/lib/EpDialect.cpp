#include "epjit/Dialect/Ep/EpDialect.h"
#include "epjit/Dialect/Ep/EpOps.h"

using namespace mlir;
using namespace epjit::ep;

#include "epjit/Dialect/Ep/EpOpsDialect.cpp.inc"

void EpDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "epjit/Dialect/Ep/EpOps.cpp.inc"
      >();
}
