#pragma once

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace epjit {

#define GEN_PASS_DECL
#include "epjit/Compiler/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "epjit/Compiler/Passes.h.inc"

}  // namespace epjit
