// ep-check-target accepts what each target can do and records the target.
// RUN: epjit-opt %s --ep-check-target=target=gfx942 | FileCheck %s --check-prefix=GFX942
// RUN: epjit-opt %s --ep-check-target=target=gfx950 | FileCheck %s --check-prefix=GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-opt %s --ep-check-target=target=sm90 | FileCheck %s --check-prefix=SM90
// RUN: epjit-opt %s --ep-check-target=target=host-gfx942 | FileCheck %s --check-prefix=HOST

// GFX942: module attributes {ep.target = "gfx942"}
// GFX950: module attributes {ep.target = "gfx950"}
// GFX1250: module attributes {ep.target = "gfx1250"}
// SM90: module attributes {ep.target = "sm90"}
// HOST: module attributes {ep.target = "host-gfx942"}
func.func @fp8_everywhere(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<target_e5m2>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}
