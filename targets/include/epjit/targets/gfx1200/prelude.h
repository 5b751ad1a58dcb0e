// gfx1200 (RDNA4): wave32, OCP fp8 in hardware (v_cvt_pk_fp8_f32), no FP4.
#pragma once
#define EPJIT_WAVE_SIZE 32
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp8.h"
