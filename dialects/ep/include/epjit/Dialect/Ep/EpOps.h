#pragma once

#include <algorithm>

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "epjit/Dialect/Ep/EpAttrs.h"
#include "epjit/Dialect/Ep/EpDialect.h"
#include "epjit/Dialect/Ep/EpTypes.h"

#define GET_OP_CLASSES
#include "epjit/Dialect/Ep/EpOps.h.inc"

namespace epjit::ep {

// Element types an !ep.ptr may point to.
bool isPointeeType(mlir::Type type);

// The element type of an !ep.ptr value.
inline mlir::Type elementTypeOf(mlir::Value ptr) {
  return llvm::cast<PtrType>(ptr.getType()).getElementType();
}

// Bytes of one element of a pointee type (i1 counts as one).
inline int64_t elementBytes(mlir::Type type) {
  return std::max<int64_t>(1, int64_t(type.getIntOrFloatBitWidth()) / 8);
}

}  // namespace epjit::ep
