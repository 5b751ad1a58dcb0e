// gfx1250: wave32, OCP fp8 in hardware, FP4 eight values per instruction.
#pragma once
#define EPJIT_WAVE_SIZE 32
#define EPJIT_STEADY_COUNTER_HZ 100000000ull  // the realtime counter: 100 MHz on every CDNA and RDNA part
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp4_pk8.h"
#include "epjit/targets/amdgcn/fp8.h"
