// Internal to ep-to-emitc: the type converter and the pattern families.
#pragma once

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"

#include "epjit/Dialect/Ep/EpOps.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit::to_emitc {

// !ep.ptr<T> -> T* with bf16 stored as uint16_t, !ep.window -> const epjit::Window*,
// index -> size_t, scalars unchanged.
void populateTypeConversions(mlir::TypeConverter& converter);

// Emits `callee<templateArgs...>(operands...)` with the given results.
mlir::Value callPrelude(mlir::OpBuilder& builder, mlir::Location loc, llvm::StringRef callee, mlir::TypeRange results,
                        mlir::ValueRange operands, llvm::ArrayRef<std::string> templateArgs = {});

// The C spelling of a pointee type after storage conversion: float, uint16_t, int32_t, ...
std::string cTypeName(mlir::Type type);

// ptr + offset, in C pointer arithmetic.
mlir::Value offsetPointer(mlir::OpBuilder& builder, mlir::Location loc, mlir::Value ptr, mlir::Value offset);

// The C++ spelling of enum values in the prelude (epjit::Scope::System, ...).
std::string preludeName(ep::MemoryScope scope);
std::string preludeName(ep::MemoryOrder order);
std::string preludeName(ep::ReduceKind kind);
std::string preludeFormatName(mlir::Attribute format);  // epjit::Fp8Format::E4M3FN / E2M1 marker
std::string preludeMxElement(mlir::Attribute format);   // epjit::MxElement::...
std::string preludeNamespace(ep::ConversionMethod method);  // epjit::prim::software, ...

// Warp geometry, memory, windows, atomics, fences, waits, barriers.
void populateScalarPatterns(mlir::TypeConverter& converter, mlir::RewritePatternSet& patterns,
                            const llvm::StringMap<int64_t>& regionIndex);
// Lane primitives: chunks, reductions, scales.
void populateLanePatterns(mlir::TypeConverter& converter, mlir::RewritePatternSet& patterns);

}  // namespace epjit::to_emitc
