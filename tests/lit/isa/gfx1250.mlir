// gfx1250 code objects: MX FP4 eight values per v_cvt_scalef32_pk8_fp4_f32,
// decoded by v_cvt_scale_pk8_f32_fp4; OCP fp8 with a +-448 clamp; wave32.
// RUN: epjit-compile --template quantize_mxfp4 --set hidden=7168 --target gfx1250 --emit asm | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-compile --template dequantize_mxfp4 --set hidden=7168 --target gfx1250 --emit asm | FileCheck %s --check-prefix=GFX1250-DEQ
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target gfx1250 --emit asm | FileCheck %s --check-prefix=GFX1250-FP8

// GFX1250-NOT: v_cvt_scalef32_pk_fp4_f32
// GFX1250: exec_lo
// GFX1250: v_cvt_scalef32_pk8_fp4_f32 v{{[0-9]+}}, v[{{[0-9]+}}:{{[0-9]+}}]
// GFX1250-NOT: v_cvt_scalef32_pk_fp4_f32
// GFX1250: ; resources quantize_mxfp4: wave 32 {{.*}} lds 0 scratch 0 code

// GFX1250-DEQ: v_cvt_scale_pk8_f32_fp4 v[{{[0-9]+}}:{{[0-9]+}}], v{{[0-9]+}}, 0x7f7f7f7f
// GFX1250-DEQ: ; resources dequantize_mxfp4: wave 32 {{.*}} lds 0 scratch 0 code

// GFX1250-FP8-DAG: 0x43e00000
// GFX1250-FP8-DAG: v_cvt_pk_fp8_f32
// GFX1250-FP8: ; resources quantize_fp8_direct: wave 32 {{.*}} lds 0 scratch 0 code
