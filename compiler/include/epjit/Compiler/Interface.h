// The interface record of a specialized module: everything the runtime needs
// to call its kernels, stated once by the template and evaluated for one
// specialization and target (docs/DSL.md, "The interface record"):
//
//   {"format": 1, "template": ..., "specialization": {...},
//    "target": {"name", "vendor", "arch", "wave_size"},
//    "kernels": [{"name", "warps_per_block", "params": [{"name", "type", "align"}]}],
//    "window_regions": [{"name", "element", "count"}],
//    "constants": {"name": value}}
//
// Parameter types are "ptr<ELEMENT>", "window", "index", "i32", "i64" or
// "f32"; elements are "i8", "i16", "i32", "i64", "bf16", "f16" or "f32". A
// pointer's "align" is the bytes its address must be a multiple of (16 where
// the kernel uses 16-byte vector accesses, else the element size), present
// once the warp ops are lowered (ep-record-pointer-alignment).
#pragma once

#include <string>

#include "mlir/IR/BuiltinOps.h"

#include "epjit/targets/TargetInfo.h"

namespace epjit::compiler {

// The version of the record's layout; the runtime refuses other versions.
inline constexpr int kInterfaceFormat = 1;

// The record of a module after ep-specialize and ep-check-target (and, for
// "align", ep-record-pointer-alignment), as JSON.
// Fails (with a diagnostic on the module) when a window region's count is not
// a constant or a kernel parameter has a type the record cannot state.
mlir::LogicalResult buildInterface(mlir::ModuleOp module, const TargetInfo& target, llvm::StringRef templateName,
                                   std::string& json);

}  // namespace epjit::compiler
