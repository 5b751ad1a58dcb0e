// gfx1200 (RDNA4) code objects: OCP fp8 through v_cvt_pk_fp8_f32 after an
// explicit +-448 clamp, decoded by v_cvt_pk_f32_fp8; wave32, no scratch; the
// EP op's module compiles; FP4 is refused naming the targets that have it.
// RUN: epjit-compile --template quantize_fp8_direct --set hidden=7168 --target gfx1200 --emit asm | FileCheck %s --check-prefix=GFX1200
// RUN: epjit-compile --template dequantize_fp8_blockwise --set hidden=7168 --target gfx1200 --emit asm | FileCheck %s --check-prefix=GFX1200-DEQ
// RUN: epjit-compile --template ep_dispatch_combine %{ep} --target gfx1200 --emit asm | FileCheck %s --check-prefix=GFX1200-EP
// RUN: epjit-compile --template ep_dispatch_combine %{ep_gather} --target gfx1200 --emit asm | FileCheck %s --check-prefix=GFX1200-EP-GATHER
// RUN: not epjit-compile --template quantize_mxfp4 --set hidden=7168 --target gfx1200 --emit asm 2>&1 | FileCheck %s --check-prefix=GFX1200-FP4

// GFX1200-DAG: 0x43e00000
// GFX1200-DAG: 0xc3e00000
// GFX1200-NOT: 0x43700000
// GFX1200: v_med3_num_f32
// GFX1200: v_cvt_pk_fp8_f32
// GFX1200: ; resources quantize_fp8_direct: wave 32 {{.*}} lds 0 scratch 0 code

// GFX1200-DEQ: v_cvt_pk_f32_fp8
// GFX1200-DEQ: ; resources dequantize_fp8_blockwise: wave 32 {{.*}} lds 0 scratch 0 code

// GFX1200-EP-DAG: ; resources ep_dispatch: wave 32 {{.*}} lds 4 scratch 0
// GFX1200-EP-DAG: ; resources ep_combine_scatter: wave 32 {{.*}} lds 0 scratch 0
// GFX1200-EP-DAG: v_cvt_pk_fp8_f32
// GFX1200-EP-GATHER-DAG: ; resources ep_combine_gather: wave 32
// GFX1200-EP-GATHER-DAG: ; resources ep_std_moe_pack: wave 32
// GFX1200-EP-GATHER-NOT: ep_std_moe_unpack

// GFX1200-FP4: quantize_mxfp4.mlir:{{[0-9]+}}:{{[0-9]+}}: error: target gfx1200 has no FP4 (E2M1) conversion instructions; targets with them: gfx950, gfx1250
