// The interface record of a specialized module: everything the runtime needs
// to call its kernels, stated once by the template and evaluated for one
// specialization and target (docs/DSL.md, "The interface record"):
//
//   {"format": N, "template": ..., "specialization": {...},
//    "target": {"name", "vendor", "arch", "wave_size", "dependent_launch"},
//    "kernels": [{"name", "warps_per_block", "when", "params": [{"name", "type", "align"}]}],
//    "window_regions": [{"name", "element", "count"}],
//    "buffers": [{"name", "bytes", "parts": [{"name", "element", "count", "offset", "meaning"}]}],
//    "constants": {"name": value}}
//
// The format version and the words for types are epjit/interface_schema.h's,
// shared with the runtime's reader. A pointer's "align" is the bytes its
// address must be a multiple of (16 where the kernel uses 16-byte vector
// accesses, else the element size), present once the warp ops are lowered
// (ep-record-pointer-alignment). A buffer part's "offset" is in bytes
// (ep::placeBuffers).
#pragma once

#include <string>

#include "mlir/IR/BuiltinOps.h"

#include "epjit/targets/TargetInfo.h"

namespace epjit::compiler {

// The record of a module after ep-specialize and ep-check-target (and, for
// "align", ep-record-pointer-alignment), as JSON.
// Fails (with a diagnostic on the module) when a window region's count is not
// a constant or a kernel parameter has a type the record cannot state.
mlir::LogicalResult buildInterface(mlir::ModuleOp module, const TargetInfo& target, llvm::StringRef templateName,
                                   std::string& json);

}  // namespace epjit::compiler
