// sm100 (Blackwell, built as sm_100a): warp 32, OCP fp8 via cvt.rn.satfinite as
// on sm90, and FP4 (E2M1) in hardware through cvt.rn.satfinite.e2m1x2.f32 and
// cvt.rn.f16x2.e2m1x2, which sm_100a has and Hopper lacks.
#pragma once
#include "epjit/targets/nvptx/device.h"
#include "epjit/targets/nvptx/fp4.h"
#include "epjit/targets/nvptx/fp8.h"
