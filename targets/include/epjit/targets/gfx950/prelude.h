// gfx950 (MI355X): wave64, OCP fp8 in hardware, FP4 two values per instruction.
#pragma once
#define EPJIT_WAVE_SIZE 64
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp4_pk2.h"
#include "epjit/targets/amdgcn/fp8.h"
