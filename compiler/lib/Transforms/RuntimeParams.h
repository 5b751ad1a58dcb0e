// ep-specialize's handling of `runtime` parameters left unbound: their
// reads in kernels become window-table reads (threaded through the helpers
// that need them), and the counts of window regions and buffer parts become
// linear forms in them, which the interface record states.
#pragma once

#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"

namespace epjit {

// Each region's or part's count that reads a runtime parameter becomes its
// value at zero (what its body yields) plus a coefficient per parameter
// (ep.count_per); a count that is not linear in them is an error.
mlir::LogicalResult linearizeCounts(mlir::ModuleOp module, const std::vector<std::string>& runtimeParams,
                                    const mlir::FrozenRewritePatternSet& patterns);

// Every other read of runtime parameter `runtimeParams[i]`: in a kernel,
// `ep.runtime_param %window[i]`; in a helper, a trailing index argument its
// callers pass. A kernel that reads one needs a window parameter.
mlir::LogicalResult threadRuntimeParams(mlir::ModuleOp module, const std::vector<std::string>& runtimeParams);

}  // namespace epjit
