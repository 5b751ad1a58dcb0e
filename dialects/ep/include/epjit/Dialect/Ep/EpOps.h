#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

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

// One buffer of ep.buffer_part declarations, laid out: each part's byte
// offset in declaration order (at the next multiple of its alignment), and
// the buffer's bytes. The one definition of that layout: ep-specialize folds
// ep.buffer_offset from it and the interface record states it.
struct BufferPlacement {
  std::string name;
  int64_t bytes = 0;
  std::vector<std::pair<BufferPartOp, int64_t>> parts;  // part, byte offset
};
// Buffers in the order their first part is declared. Fails (with a
// diagnostic on the part) when a count is not a constant or is negative.
mlir::FailureOr<std::vector<BufferPlacement>> placeBuffers(mlir::ModuleOp module);

}  // namespace epjit::ep
