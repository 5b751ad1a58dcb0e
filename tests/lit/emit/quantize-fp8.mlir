// The target's fp8 in emitted source: FNUZ on gfx942 (and host-gfx942), OCP
// elsewhere; sm90 goes through cvt.rn.satfinite.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=100 --target gfx942 --emit hip | FileCheck %s --check-prefix=GFX942
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=100 --target gfx950 --emit hip | FileCheck %s --check-prefix=GFX950
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=100 --target gfx1250 --emit hip | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=100 --target sm90 --emit hip | FileCheck %s --check-prefix=SM90
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=100 --target host-gfx942 --emit hip | FileCheck %s --check-prefix=HOST

// hidden = 100 is not a multiple of the 8-element chunk: unaligned accesses.
// GFX942: epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk<epjit::Fp8Format::E4M3FNUZ, false>(
// GFX950: epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk<epjit::Fp8Format::E4M3FN, false>(
// GFX1250: epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk<epjit::Fp8Format::E4M3FN, false>(
// SM90: #include "epjit/targets/sm90/prelude.h"
// SM90: extern "C" __global__ __launch_bounds__(128, 1)
// SM90: epjit::prim::ptx_cvt_satfinite::quantize_fp8_chunk<epjit::Fp8Format::E4M3FN, false>(
// HOST: epjit::prim::software::quantize_fp8_chunk<epjit::Fp8Format::E4M3FNUZ, false>(
