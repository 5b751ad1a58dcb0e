// gfx950 (MI355X): wave64, OCP fp8 in hardware, FP4 two values per instruction.
#pragma once
#define EPJIT_WAVE_SIZE 64
#define EPJIT_STEADY_COUNTER_HZ 100000000ull  // the realtime counter: 100 MHz on every CDNA and RDNA part
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp4_pk2.h"
#include "epjit/targets/amdgcn/fp8.h"
