// The target a module is being compiled for, as ep-check-target recorded it.
#pragma once

#include "mlir/IR/BuiltinOps.h"

#include "epjit/targets/TargetInfo.h"

namespace epjit {

// The TargetInfo named by the module's `ep.target`; emits an error on `module`
// naming `pass` and returns nullptr when there is none or it is unknown.
const TargetInfo* requireModuleTarget(mlir::ModuleOp module, llvm::StringRef pass);

}  // namespace epjit
