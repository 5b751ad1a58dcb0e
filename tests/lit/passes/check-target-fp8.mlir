// An fp8 format the target's hardware does not convert is an error unless
// the template asks for the software codec; host targets convert everything.
// RUN: not epjit-opt %s --ep-check-target=target=gfx950 2>&1 | FileCheck %s --check-prefix=GFX950
// RUN: not epjit-opt %s --ep-check-target=target=gfx1250 2>&1 | FileCheck %s --check-prefix=GFX1250
// RUN: not epjit-opt %s --ep-check-target=target=sm90 2>&1 | FileCheck %s --check-prefix=SM90
// RUN: epjit-opt %s --ep-check-target=target=gfx942 | FileCheck %s --check-prefix=GFX942
// RUN: epjit-opt %s --ep-check-target=target=host | FileCheck %s --check-prefix=HOST

// GFX950: error: target gfx950 converts e4m3fn and e5m2 in hardware, not e4m3fnuz; targets that do: gfx942 (use #ep.fp8<target>, or ask for `software_fallback`)
// GFX1250: error: target gfx1250 converts e4m3fn and e5m2 in hardware, not e4m3fnuz; targets that do: gfx942
// SM90: error: target sm90 converts e4m3fn and e5m2 in hardware, not e4m3fnuz
// GFX942: ep.target = "gfx942"
// HOST: ep.target = "host"
func.func @fnuz(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp8<e4m3fnuz>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  return
}
