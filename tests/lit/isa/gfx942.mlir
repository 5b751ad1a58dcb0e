// gfx942 code objects: FNUZ fp8 through v_cvt_pk_fp8_f32 after an explicit
// +-240 clamp (v_med3_f32), wave64, no scratch.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target gfx942 --emit asm | FileCheck %s --check-prefix=GFX942
// RUN: epjit-compile --template dequantize_fp8_blockwise --set hidden=7168 --target gfx942 --emit asm | FileCheck %s --check-prefix=GFX942-DEQ
// RUN: not epjit-compile --template quantize_mxfp4 --set hidden=7168 --target gfx942 --emit asm 2>&1 | FileCheck %s --check-prefix=GFX942-FP4

// GFX942-DAG: 0x43700000
// GFX942-DAG: 0xc3700000
// GFX942-NOT: 0x43e00000
// GFX942: v_med3_f32
// GFX942: v_cvt_pk_fp8_f32
// GFX942: ; resources quantize_fp8_direct: wave 64 {{.*}} lds 0 scratch 0 code

// GFX942-DEQ: v_cvt_pk_f32_fp8
// GFX942-DEQ: ; resources dequantize_fp8_blockwise: wave 64 {{.*}} lds 0 scratch 0 code

// GFX942-FP4: quantize_mxfp4.mlir:{{[0-9]+}}:{{[0-9]+}}: error: target gfx942 has no FP4 (E2M1) conversion instructions; targets with them: gfx950, gfx1250
