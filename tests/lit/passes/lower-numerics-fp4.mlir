// FP4: two per instruction on gfx950 and sm100, eight on gfx1250, the
// numerics.h codec on the host and on sm90 (no FP4 instructions).
// RUN: epjit-opt %s --ep-check-target=target=gfx950 --ep-lower-numerics | FileCheck %s --check-prefix=GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 --ep-lower-numerics | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics | FileCheck %s --check-prefix=SM90
// RUN: epjit-opt %s --ep-check-target=target=sm100 --ep-lower-numerics | FileCheck %s --check-prefix=SM100
// RUN: epjit-opt %s --ep-check-target=target=host-gfx950 --ep-lower-numerics | FileCheck %s --check-prefix=HOST
// RUN: epjit-opt %s --ep-check-target=target=host-sm100 --ep-lower-numerics | FileCheck %s --check-prefix=HOST
// RUN: not epjit-opt %s --ep-check-target=target=gfx942 --ep-lower-numerics 2>&1 | FileCheck %s --check-prefix=GFX942

// GFX950-COUNT-2: method = #ep.method<amdgcn_scalef32_pk_fp4>
// GFX1250-COUNT-2: method = #ep.method<amdgcn_scalef32_pk8_fp4>
// SM90-COUNT-2: method = #ep.method<software>
// SM100-COUNT-2: method = #ep.method<ptx_cvt_e2m1x2>
// HOST-COUNT-2: method = #ep.method<software>
// GFX942: error: target gfx942 has no FP4 (E2M1) conversion instructions
func.func @mxfp4(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<i8>, %n: index) {
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  ep.warp.dequantize %q[%n], %x[%n], %n scales %s[%n] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>} : !ep.ptr<i8> -> !ep.ptr<bf16>, !ep.ptr<i8>
  return
}
