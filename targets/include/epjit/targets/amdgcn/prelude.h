// The prelude of every AMD target (gfx942, gfx950, gfx1250, gfx1200). What
// tells them apart is defined in front of it by the emitted code, from
// TargetInfo (TargetInfo::prelude_defines): EPJIT_WAVE_SIZE (64 on CDNA, 32
// on gfx1250 and RDNA), EPJIT_STEADY_COUNTER_HZ, and EPJIT_FP4_PACK where the
// target converts FP4 in hardware (2 values an instruction on gfx950, 8 on
// gfx1250). Which fp8 format a conversion uses comes with each call.
#pragma once

#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp8.h"

#if defined(EPJIT_FP4_PACK)
#if EPJIT_FP4_PACK == 2
#include "epjit/targets/amdgcn/fp4_pk2.h"
#elif EPJIT_FP4_PACK == 8
#include "epjit/targets/amdgcn/fp4_pk8.h"
#else
#error "EPJIT_FP4_PACK is 2 (gfx950) or 8 (gfx1250): TargetInfo::prelude_defines sets it"
#endif
#endif
