// sm90 (Hopper): warp 32, OCP fp8 via cvt.rn.satfinite, no FP4 instructions
// (FP4 only through the numerics.h codec, when a template asks for it).
#pragma once
#include "epjit/targets/nvptx/device.h"
#include "epjit/targets/nvptx/fp8.h"
