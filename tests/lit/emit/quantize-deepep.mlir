// DeepEP's per-128 cast in emitted source: the NaN-ignoring amax, the
// prelude's DeepEP scale functions, and codes from x * factor through each
// target's OCP E4M3 conversion (software on gfx942, whose hardware converts
// FNUZ only).
// RUN: epjit-compile --input %epjit_src/tests/unit/templates/inputs/deepep_cast.mlir --target gfx942 --emit hip | FileCheck %s --check-prefixes=CHECK,GFX942
// RUN: epjit-compile --input %epjit_src/tests/unit/templates/inputs/deepep_cast.mlir --target gfx950 --emit hip | FileCheck %s --check-prefixes=CHECK,GFX950
// RUN: epjit-compile --input %epjit_src/tests/unit/templates/inputs/deepep_cast.mlir --target gfx1250 --emit hip | FileCheck %s --check-prefixes=CHECK,GFX950
// RUN: epjit-compile --input %epjit_src/tests/unit/templates/inputs/deepep_cast.mlir --target sm90 --emit hip | FileCheck %s --check-prefixes=CHECK,SM90
// RUN: epjit-compile --input %epjit_src/tests/unit/templates/inputs/deepep_cast.mlir --target host --emit hip | FileCheck %s --check-prefixes=CHECK,HOST

// CHECK-LABEL: void deepep_cast(
// CHECK: epjit::prim::chunk_reduce<epjit::Reduce::AbsMaxNum, 8>(
// CHECK: epjit::deepep_scale_inv<false>(
// CHECK: epjit::deepep_factor<false>(
// GFX942: epjit::prim::software::quantize_fp8_chunk_multiplied<epjit::Fp8Format::E4M3FN, false>(
// GFX950: epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk_multiplied<epjit::Fp8Format::E4M3FN, false>(
// SM90: epjit::prim::ptx_cvt_satfinite::quantize_fp8_chunk_multiplied<epjit::Fp8Format::E4M3FN, false>(
// HOST: epjit::prim::software::quantize_fp8_chunk_multiplied<epjit::Fp8Format::E4M3FN, false>(
// CHECK-LABEL: void deepep_cast_pow2(
// CHECK: epjit::deepep_scale_inv<true>(
// CHECK: epjit::deepep_factor<true>(
// CHECK-LABEL: void deepep_cast_ue8m0(
// CHECK: epjit::deepep_ue8m0_scale(
// CHECK: epjit::deepep_factor<true>(
