// gfx942 (MI300X/MI308X/MI325X): wave64, FNUZ fp8 in hardware, no FP4.
#pragma once
#define EPJIT_WAVE_SIZE 64
#define EPJIT_STEADY_COUNTER_HZ 100000000ull  // the realtime counter: 100 MHz on every CDNA and RDNA part
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp8.h"
