#include "epjit/Dialect/Ep/EpDialect.h"

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

LogicalResult EpDialect::verifyOperationAttribute(Operation* op, NamedAttribute attribute) {
  StringRef name = attribute.getName().strref();
  if (name == kTargetAttrName || name == kLoweringAttrName) {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(attribute.getValue()))
      return op->emitError() << "'" << name << "' must be a string attribute on a module";
    return success();
  }
  if (name == kSpecializationAttrName || name == kConstantsAttrName || name == kTargetBoundsAttrName) {
    if (!isa<ModuleOp>(op) || !isa<DictionaryAttr>(attribute.getValue()))
      return op->emitError() << "'" << name << "' must be a dictionary attribute on a module";
    return success();
  }
  if (name == kRuntimeParamsAttrName) {
    auto names = dyn_cast<ArrayAttr>(attribute.getValue());
    if (!isa<ModuleOp>(op) || !names || !llvm::all_of(names, [](Attribute a) { return isa<StringAttr>(a); }))
      return op->emitError() << "'" << name << "' must be an array of names on a module";
    return success();
  }
  if (name == kCountPerAttrName) {
    auto coefficients = dyn_cast<DictionaryAttr>(attribute.getValue());
    if (!isa<WindowRegionOp, BufferPartOp>(op) || !coefficients ||
        !llvm::all_of(coefficients, [](NamedAttribute a) { return isa<IntegerAttr>(a.getValue()); }))
      return op->emitError() << "'" << name
                             << "' must be a dictionary of integer coefficients on an ep.window_region or "
                                "ep.buffer_part";
    return success();
  }
  if (name == kWhenAttrName) {
    if (!isa<KernelOp>(op) || !isa<StringAttr>(attribute.getValue()))
      return op->emitError() << "'" << name << "' must be a string attribute on an ep.kernel";
    return success();
  }
  return op->emitError() << "unknown ep dialect attribute '" << name << "'";
}
