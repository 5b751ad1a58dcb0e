// gfx950 code objects: OCP fp8 with a +-448 clamp; MX FP4 packed by four
// v_cvt_scalef32_pk_fp4_f32 per dword (byte selects 0..3); wave64; no scratch.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target gfx950 --emit asm | FileCheck %s --check-prefix=GFX950
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=7168 --target gfx950 --emit asm | FileCheck %s --check-prefix=GFX950-FP4
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=7168 --target gfx950 --emit asm | FileCheck %s --check-prefix=GFX950-DEQ

// GFX950-DAG: 0x43e00000
// GFX950-DAG: 0xc3e00000
// GFX950-NOT: 0x43700000
// GFX950: v_med3_f32
// GFX950: v_cvt_pk_fp8_f32
// GFX950: ; resources quantize_fp8_direct: wave 64 {{.*}} lds 0 scratch 0 code

// GFX950-FP4: v_cvt_scalef32_pk_fp4_f32 [[DST:v[0-9]+]], v{{[0-9]+}}, v{{[0-9]+}}, v{{[0-9]+}} {{ *}}//
// GFX950-FP4: v_cvt_scalef32_pk_fp4_f32 [[DST]], {{.*}} op_sel:[0,0,1,0]
// GFX950-FP4: v_cvt_scalef32_pk_fp4_f32 [[DST]], {{.*}} op_sel:[0,0,0,1]
// GFX950-FP4: v_cvt_scalef32_pk_fp4_f32 [[DST]], {{.*}} op_sel:[0,0,1,1]
// GFX950-FP4-NOT: v_cvt_scalef32_pk_fp4_f32
// GFX950-FP4: ; resources quantize_mxfp4: wave 64 {{.*}} lds 0 scratch 0 code

// GFX950-DEQ: v_cvt_scalef32_pk_f32_fp4
// GFX950-DEQ: ; resources dequantize_mxfp4: wave 64 {{.*}} lds 0 scratch 0 code
