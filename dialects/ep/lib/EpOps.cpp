#include "epjit/Dialect/Ep/EpOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace epjit::ep;

#define GET_OP_CLASSES
#include "epjit/Dialect/Ep/EpOps.cpp.inc"
