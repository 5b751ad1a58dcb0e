#include "epjit/Dialect/Ep/EpTypes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "epjit/Dialect/Ep/EpDialect.h"
#include "epjit/Dialect/Ep/EpOps.h"

using namespace mlir;

namespace epjit::ep {

bool isPointeeType(Type type) {
  if (isa<RowElementParamType>(type)) return true;
  if (type.isInteger(8) || type.isInteger(16) || type.isInteger(32) || type.isInteger(64)) return true;
  return type.isBF16() || type.isF16() || type.isF32();
}

LogicalResult PtrType::verify(llvm::function_ref<InFlightDiagnostic()> emitError, Type elementType) {
  if (isPointeeType(elementType)) return success();
  return emitError() << "!ep.ptr element type must be i8, i16, i32, i64, bf16, f16 or f32, got "
                     << elementType;
}

}  // namespace epjit::ep

#define GET_TYPEDEF_CLASSES
#include "epjit/Dialect/Ep/EpOpsTypes.cpp.inc"

void epjit::ep::EpDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "epjit/Dialect/Ep/EpOpsTypes.cpp.inc"
      >();
}
