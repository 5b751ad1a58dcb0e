// gfx1200 (RDNA4): wave32, OCP fp8 in hardware (v_cvt_pk_fp8_f32), no FP4.
#pragma once
#define EPJIT_WAVE_SIZE 32
#define EPJIT_STEADY_COUNTER_HZ 100000000ull  // the realtime counter: 100 MHz on every CDNA and RDNA part
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp8.h"
