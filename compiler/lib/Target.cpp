#include "epjit/Compiler/Target.h"

#include "epjit/Dialect/Ep/EpDialect.h"

namespace epjit {

const TargetInfo* requireModuleTarget(mlir::ModuleOp module, llvm::StringRef pass) {
  auto name = module->getAttrOfType<mlir::StringAttr>(ep::EpDialect::kTargetAttrName);
  if (!name) {
    module.emitError() << pass << " needs the module's target: run ep-check-target=target=NAME first";
    return nullptr;
  }
  const TargetInfo* target = find_target(name.strref());
  if (!target) module.emitError() << "unknown target '" << name.strref() << "'; known: " << target_names();
  return target;
}

}  // namespace epjit
