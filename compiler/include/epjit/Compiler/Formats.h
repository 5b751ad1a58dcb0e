// How the ep dialect's numerics attributes map to numerics.h formats on a target.
#pragma once

#include "epjit/Dialect/Ep/EpAttrs.h"
#include "epjit/numerics.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit {

// The concrete fp8 format `kind` names on `target` (`target` kinds resolve to
// the target's own e4m3 / e5m2).
Fp8Format resolveFp8(ep::Fp8Kind kind, const TargetInfo& target);

// The attribute kind of a concrete format.
ep::Fp8Kind fp8KindOf(Fp8Format format);

}  // namespace epjit
