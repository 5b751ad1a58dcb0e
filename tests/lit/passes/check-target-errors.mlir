// What a target cannot do is an error naming the target, the feature and
// the targets that have it.
// RUN: not epjit-opt %s --ep-check-target=target=gfx942 2>&1 | FileCheck %s --check-prefix=GFX942
// RUN: not epjit-opt %s --ep-check-target=target=host-gfx942 2>&1 | FileCheck %s --check-prefix=HOST
// RUN: not epjit-opt %s --ep-check-target=target=gfx1200 2>&1 | FileCheck %s --check-prefix=GFX1200
// RUN: epjit-opt %s --ep-check-target=target=gfx950 | FileCheck %s --check-prefix=GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-opt %s --ep-check-target=target=sm90 | FileCheck %s --check-prefix=SM90
// RUN: epjit-opt %s --ep-check-target=target=sm100 | FileCheck %s --check-prefix=SM100
// RUN: not epjit-opt %s --ep-check-target=target=gfx90a 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// GFX942: error: target gfx942 has no FP4 (E2M1) conversion instructions; targets with them: gfx950, gfx1250, sm100; in software (the numerics.h codec): sm90
// GFX1200: error: target gfx1200 has no FP4 (E2M1) conversion instructions; targets with them: gfx950, gfx1250, sm100; in software (the numerics.h codec): sm90
// HOST: error: target host-gfx942 has no FP4 (E2M1) conversion instructions; targets with them: gfx950, gfx1250, sm100; in software (the numerics.h codec): sm90
// GFX950: ep.target = "gfx950"
// GFX1250: ep.target = "gfx1250"
// SM90: ep.target = "sm90"
// SM100: ep.target = "sm100"
// UNKNOWN: error: unknown target 'gfx90a'; known targets: gfx942, gfx950, gfx1250, gfx1200, sm90, sm100, host, host-gfx942, host-gfx950, host-gfx1250, host-sm100
func.func @mxfp4(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<i8>, %n: index) {
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  // software_fallback does not bring FP4 to gfx942, whose numerics have none.
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>, software_fallback} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  return
}
