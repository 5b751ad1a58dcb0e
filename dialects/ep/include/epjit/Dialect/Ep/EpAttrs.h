#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "epjit/Dialect/Ep/EpEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "epjit/Dialect/Ep/EpAttrs.h.inc"

namespace epjit::ep {
// DeepEP's per-128 cast (quantize only): its elements are multiplied by the factor of ep.deepep_scale.
inline bool isDeepEpScale(ScaleKind kind) {
  return kind == ScaleKind::deepep || kind == ScaleKind::deepep_pow2 || kind == ScaleKind::deepep_ue8m0;
}
}  // namespace epjit::ep
