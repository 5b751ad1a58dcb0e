// gfx942 (MI300X/MI308X/MI325X): wave64, FNUZ fp8 in hardware, no FP4.
#pragma once
#define EPJIT_WAVE_SIZE 64
#include "epjit/targets/amdgcn/device.h"
#include "epjit/targets/amdgcn/fp8.h"
