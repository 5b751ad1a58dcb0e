// sm90 PTX: fp8 through cvt.rn.satfinite.e4m3x2.f32 (saturating); MX FP4
// through the numerics.h codec (sm90 has no FP4 instructions, and sm_90
// code holds none of sm_100a's); no spills.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90
// RUN: epjit-compile --template quantize_fp8_blockwise --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90-BW
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90-FP4
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=7168 --target sm90 --emit asm | FileCheck %s --check-prefix=SM90-DEQ
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=7168 --target sm90 --emit hip | FileCheck %s --check-prefix=SM90-FP4-SOURCE

// SM90: .target sm_90
// SM90: .entry quantize_fp8_direct
// SM90: griddepcontrol.launch_dependents;
// SM90: griddepcontrol.wait;
// SM90: cvt.rn.satfinite.e4m3x2.f32
// SM90: ; resources quantize_fp8_direct: registers {{[0-9]+}} spill 0 stack 0 code

// SM90-BW: shfl.sync.bfly
// SM90-BW: div.rn.f32
// SM90-BW: cvt.rn.satfinite.e4m3x2.f32
// SM90-BW: ; resources quantize_fp8_blockwise: registers {{[0-9]+}} spill 0 stack 0 code

// SM90-FP4: .target sm_90
// SM90-FP4-NOT: e2m1x2
// SM90-FP4: ; resources quantize_mxfp4: registers {{[0-9]+}} spill 0 stack 0 code
// SM90-DEQ-NOT: e2m1x2
// SM90-DEQ: ; resources dequantize_mxfp4: registers {{[0-9]+}} spill 0 stack 0 code
// SM90-FP4-SOURCE: #include "epjit/targets/sm90/prelude.h"
// SM90-FP4-SOURCE: epjit::prim::software::quantize_fp4_chunk_mx<true>(
