// ep-lower-numerics resolves the target's fp8 and picks each conversion's primitive.
// RUN: epjit-opt %s --ep-check-target=target=gfx942 --ep-lower-numerics | FileCheck %s --check-prefix=GFX942
// RUN: epjit-opt %s --ep-check-target=target=gfx950 --ep-lower-numerics | FileCheck %s --check-prefix=GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 --ep-lower-numerics | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics | FileCheck %s --check-prefix=SM90
// RUN: epjit-opt %s --ep-check-target=target=host-gfx942 --ep-lower-numerics | FileCheck %s --check-prefix=HOST
// RUN: not epjit-opt %s --ep-lower-numerics 2>&1 | FileCheck %s --check-prefix=NOTARGET

// GFX942: ep.warp.quantize {{.*}}{format = #ep.fp8<e4m3fnuz>, method = #ep.method<amdgcn_pk_fp8>}
// GFX942: ep.warp.dequantize {{.*}}format = #ep.fp8<e5m2fnuz>, method = #ep.method<amdgcn_pk_fp8>
// GFX950: ep.warp.quantize {{.*}}{format = #ep.fp8<e4m3fn>, method = #ep.method<amdgcn_pk_fp8>}
// GFX950: ep.warp.dequantize {{.*}}format = #ep.fp8<e5m2>, method = #ep.method<amdgcn_pk_fp8>
// GFX1250: ep.warp.quantize {{.*}}{format = #ep.fp8<e4m3fn>, method = #ep.method<amdgcn_pk_fp8>}
// GFX1250: ep.warp.dequantize {{.*}}format = #ep.fp8<e5m2>, method = #ep.method<amdgcn_pk_fp8>
// SM90: ep.warp.quantize {{.*}}{format = #ep.fp8<e4m3fn>, method = #ep.method<ptx_cvt_satfinite>}
// SM90: ep.warp.dequantize {{.*}}format = #ep.fp8<e5m2>, method = #ep.method<ptx_cvt_satfinite>
// HOST: ep.warp.quantize {{.*}}{format = #ep.fp8<e4m3fnuz>, method = #ep.method<software>}
// HOST: ep.warp.dequantize {{.*}}format = #ep.fp8<e5m2fnuz>, method = #ep.method<software>
// NOTARGET: error: ep-lower-numerics needs the module's target: run ep-check-target=target=NAME first
func.func @fp8(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  ep.warp.dequantize %q[%n], %x[%n], %n scales %s[%n] {format = #ep.fp8<target_e5m2>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<i8> -> !ep.ptr<bf16>, !ep.ptr<f32>
  return
}
