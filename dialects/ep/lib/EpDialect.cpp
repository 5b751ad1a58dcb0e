#include "epjit/Dialect/Ep/EpDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "epjit/Dialect/Ep/EpAttrs.h"
#include "epjit/Dialect/Ep/EpOps.h"
#include "epjit/Dialect/Ep/EpTypes.h"

using namespace mlir;
using namespace epjit::ep;

#include "epjit/Dialect/Ep/EpOpsDialect.cpp.inc"
#include "epjit/Dialect/Ep/EpEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "epjit/Dialect/Ep/EpAttrs.cpp.inc"

void EpDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "epjit/Dialect/Ep/EpOps.cpp.inc"
      >();
  registerTypes();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "epjit/Dialect/Ep/EpAttrs.cpp.inc"
      >();
}

namespace {

bool isKernelArgumentType(Type type) {
  return isa<PtrType, WindowType, IndexType>(type) || type.isInteger(32) || type.isInteger(64) ||
         type.isF32();
}

LogicalResult verifyKernelAttribute(Operation* op, NamedAttribute attribute) {
  auto func = dyn_cast<func::FuncOp>(op);
  if (!func) return op->emitError() << "'ep.kernel' may only mark a func.func";
  auto dict = dyn_cast<DictionaryAttr>(attribute.getValue());
  auto warps = dict ? dict.getAs<IntegerAttr>("warps_per_block") : IntegerAttr();
  if (!warps || warps.getInt() < 1) {
    return op->emitError() << "'ep.kernel' must be a dictionary with an integer warps_per_block >= 1, "
                              "e.g. {ep.kernel = {warps_per_block = 4 : i64}}";
  }
  if (func.getNumResults() != 0) return op->emitError() << "an ep kernel returns nothing";
  for (auto [index, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (!isKernelArgumentType(type)) {
      return op->emitError() << "ep kernel argument #" << index << " has type " << type
                             << "; kernel arguments are !ep.ptr, !ep.window, index, i32, i64 or f32";
    }
  }
  return success();
}

}  // namespace

LogicalResult EpDialect::verifyOperationAttribute(Operation* op, NamedAttribute attribute) {
  StringRef name = attribute.getName().strref();
  if (name == kKernelAttrName) return verifyKernelAttribute(op, attribute);
  if (name == kTargetAttrName || name == kLoweringAttrName) {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(attribute.getValue()))
      return op->emitError() << "'" << name << "' must be a string attribute on a module";
    return success();
  }
  if (name == kSpecializationAttrName) {
    if (!isa<ModuleOp>(op) || !isa<DictionaryAttr>(attribute.getValue()))
      return op->emitError() << "'" << name << "' must be a dictionary attribute on a module";
    return success();
  }
  return op->emitError() << "unknown ep dialect attribute '" << name << "'";
}
