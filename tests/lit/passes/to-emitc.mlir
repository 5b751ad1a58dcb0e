// ep-to-emitc: kernels become extern "C" functions calling the target's
// prelude; GPUs get __global__ and launch bounds of warps * wave, the host
// an argument-array entry point. Window regions are numbered in declaration
// order and their count bodies go with them.
// RUN: epjit-opt %s --ep-check-target=target=gfx942 --ep-lower-numerics --ep-lower-warp-ops --ep-to-emitc | FileCheck %s --check-prefixes=CHECK,GFX942
// RUN: epjit-opt %s --ep-check-target=target=gfx950 --ep-lower-numerics --ep-lower-warp-ops --ep-to-emitc | FileCheck %s --check-prefixes=CHECK,GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 --ep-lower-numerics --ep-lower-warp-ops --ep-to-emitc | FileCheck %s --check-prefixes=CHECK,GFX1250
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops --ep-to-emitc | FileCheck %s --check-prefixes=CHECK,SM90
// RUN: epjit-opt %s --ep-check-target=target=host --ep-lower-numerics --ep-lower-warp-ops --ep-to-emitc | FileCheck %s --check-prefixes=CHECK,HOST
// RUN: not epjit-opt %s --ep-check-target=target=host --ep-to-emitc 2>&1 | FileCheck %s --check-prefix=ORDER

// ORDER: error: ep-to-emitc needs lane primitives: run ep-lower-warp-ops first
// GFX942: emitc.verbatim "#define EPJIT_WAVE_SIZE 64"
// GFX942-NEXT: emitc.verbatim "#define EPJIT_STEADY_COUNTER_HZ 100000000ull"
// GFX942-NEXT: emitc.include "epjit/targets/amdgcn/prelude.h"
// GFX950: emitc.verbatim "#define EPJIT_WAVE_SIZE 64"
// GFX950-NEXT: emitc.verbatim "#define EPJIT_STEADY_COUNTER_HZ 100000000ull"
// GFX950-NEXT: emitc.verbatim "#define EPJIT_FP4_PACK 2"
// GFX950-NEXT: emitc.include "epjit/targets/amdgcn/prelude.h"
// GFX1250: emitc.verbatim "#define EPJIT_WAVE_SIZE 32"
// GFX1250-NEXT: emitc.verbatim "#define EPJIT_STEADY_COUNTER_HZ 100000000ull"
// GFX1250-NEXT: emitc.verbatim "#define EPJIT_FP4_PACK 8"
// GFX1250-NEXT: emitc.include "epjit/targets/amdgcn/prelude.h"
// SM90: emitc.verbatim "#define EPJIT_WAVE_SIZE 32"
// SM90-NEXT: emitc.include "epjit/targets/sm90/prelude.h"
// HOST: emitc.verbatim "#define EPJIT_WAVE_SIZE 32"
// HOST-NEXT: emitc.include "epjit/targets/host/prelude.h"
// CHECK-NOT: ep.window_region
ep.window_region @recv_tokens : i32 {
  %c = arith.constant 64 : index
  ep.yield %c : index
}
ep.window_region @recv_counts : bf16 {
  %c = arith.constant 8 : index
  ep.yield %c : index
}

// CHECK-LABEL: emitc.func @kernel
// The window table comes by value (constant/scalar cache); the body takes its address.
// CHECK-SAME: (%{{.*}}: !emitc.ptr<ui16>, %{{.*}}: !emitc.ptr<i8>, %{{.*}}: !emitc.ptr<i32>, %[[W:.*]]: !emitc.opaque<"EPJIT_WINDOW_PARAM">, %{{.*}}: !emitc.size_t)
// GFX942-SAME: specifiers = ["extern \22C\22", "__global__", "__launch_bounds__(128)"]
// GFX950-SAME: specifiers = ["extern \22C\22", "__global__", "__launch_bounds__(128)"]
// GFX1250-SAME: specifiers = ["extern \22C\22", "__global__", "__launch_bounds__(64)"]
// SM90-SAME: specifiers = ["extern \22C\22", "__global__", "__launch_bounds__(64, 1)"]
// HOST-SAME: specifiers = ["extern \22C\22"]
// A kernel on a target with programmatic dependent launch first lets the
// next one launch, then computes what its parameters alone give (the peer
// address: the window table's constant-cache read), then waits for the
// kernel before it, right before its first memory access.
// GFX942-NOT: dependent_grids
// GFX950-NOT: dependent_grids
// GFX1250-NOT: dependent_grids
// HOST-NOT: dependent_grids
// CHECK: call_opaque "epjit::window_address"(%[[W]]) : (!emitc.opaque<"EPJIT_WINDOW_PARAM">) -> !emitc.ptr<!emitc.opaque<"const epjit::Window">>
// SM90-NEXT: call_opaque "epjit::launch_dependent_grids"() : () -> ()
// CHECK: call_opaque "epjit::global_warp_index"()
// CHECK: call_opaque "epjit::peer_ptr"({{.*}}) {template_args = [#emitc.opaque<"uint16_t">, #emitc.opaque<"1">]}
// SM90-NEXT: call_opaque "epjit::wait_for_prior_grid"() : () -> ()
// GFX942-NOT: prior_grid
// GFX950-NOT: prior_grid
// GFX1250-NOT: prior_grid
// HOST-NOT: prior_grid
// CHECK: call_opaque "epjit::warp_atomic_add"({{.*}}) {template_args = [#emitc.opaque<"epjit::Scope::System">, #emitc.opaque<"epjit::Order::AcqRel">]}
// CHECK: call_opaque "epjit::warp_wait_until"({{.*}}) {template_args = [#emitc.opaque<"epjit::Until::GE">, #emitc.opaque<"epjit::Scope::System">]}
// A prefetch is kept (it declares no memory effects) and becomes the prelude's hint at its address.
// CHECK: %[[ELEMENT:.*]] = subscript %{{.*}}[%{{.*}}] : (!emitc.ptr<i32>, !emitc.size_t) -> !emitc.lvalue<i32>
// CHECK-NEXT: %[[AT:.*]] = address_of %[[ELEMENT]] : !emitc.lvalue<i32>
// CHECK-NEXT: call_opaque "epjit::warp_prefetch"(%[[AT]]) : (!emitc.ptr<i32>) -> ()
// CHECK: call_opaque "epjit::fence"() {template_args = [#emitc.opaque<"epjit::Scope::Agent">, #emitc.opaque<"epjit::Order::Release">]}
// GFX942: "epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk"{{.*}}#emitc.opaque<"epjit::Fp8Format::E4M3FNUZ">
// GFX950: "epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk"{{.*}}#emitc.opaque<"epjit::Fp8Format::E4M3FN">
// GFX1250: "epjit::prim::amdgcn_pk_fp8::quantize_fp8_chunk"{{.*}}#emitc.opaque<"epjit::Fp8Format::E4M3FN">
// SM90: "epjit::prim::ptx_cvt_satfinite::quantize_fp8_chunk"{{.*}}#emitc.opaque<"epjit::Fp8Format::E4M3FN">
// HOST: "epjit::prim::software::quantize_fp8_chunk"{{.*}}#emitc.opaque<"epjit::Fp8Format::E4M3FN">
// A copy around a body holds a lane's chunks in a variable of the prelude's
// type across it (the host holds nothing).
// GFX942: %[[HELD:.*]] = call_opaque "epjit::prim::hold_chunks"{{.*}} -> !emitc.opaque<"epjit::prim::HeldChunks<4>">
// GFX942: call_opaque "epjit::block_barrier"
// GFX942: call_opaque "epjit::prim::put_chunks"(%[[HELD]], {{.*}}template_args = [#emitc.opaque<"8">, #emitc.opaque<"4">, #emitc.opaque<"true">]
// SM90: %[[HELD:.*]] = call_opaque "epjit::prim::hold_chunks"{{.*}} -> !emitc.opaque<"epjit::prim::HeldChunks<8>">
// SM90: call_opaque "epjit::block_barrier"
// SM90: call_opaque "epjit::prim::put_chunks"(%[[HELD]], {{.*}}template_args = [#emitc.opaque<"8">, #emitc.opaque<"8">, #emitc.opaque<"true">]
// HOST-NOT: hold_chunks
// HOST: call_opaque "epjit::block_barrier"
// HOST-NOT: put_chunks
// A warp barrier is the prelude's (__syncwarp on NVIDIA, empty on the host),
// and so is a block's vote, on every target.
// CHECK: call_opaque "epjit::warp_barrier"
// CHECK: %[[ANY:.*]] = call_opaque "epjit::block_any"(%{{.*}}) : (i1) -> i1
// CHECK: if %[[ANY]]
// HOST-LABEL: emitc.func @kernel__epjit_host_entry
// HOST: call_opaque "epjit::host::enter"
// HOST-COUNT-5: call_opaque "epjit::host::arg"
// HOST: call @kernel(
ep.kernel @kernel(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %flags: !ep.ptr<i32>, %w: !ep.window, %n: index)
    warps_per_block(2) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : i32
  %c7 = arith.constant 7 : i32
  %warp = ep.global_warp_index : index
  %peer = ep.peer_ptr %w[%warp] @recv_counts[%c0] : !ep.ptr<bf16>
  %old = ep.atomic_rmw add %flags[%c0], %c1 scope(system) order(acq_rel) : !ep.ptr<i32>
  %ok = ep.wait_until %flags[%warp] ge %old scope(system) timeout_ms(%c7) error(%flags[%c0], %c7) : !ep.ptr<i32>, !ep.ptr<i32>
  ep.prefetch %flags[%warp] : !ep.ptr<i32>
  ep.fence scope(agent) order(release)
  ep.warp.quantize %peer[%c0], %q[%c0], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  ep.warp.copy_row_around %x[%c0], %n : !ep.ptr<bf16> {
    ep.block_barrier
    %true = arith.constant true
    ep.copy_to %true, %peer : !ep.ptr<bf16>
  }
  ep.warp_barrier
  %any = ep.block_any %ok
  scf.if %any {
    ep.store %c1, %flags[%c0] : !ep.ptr<i32>
  }
}

// A prefetch declares no memory effects but reads a line the kernel before
// may still write: the wait comes before it (here inside an scf.if, the
// entry block's first op that touches memory).
// SM90-LABEL: emitc.func @prefetch_first
// SM90: call_opaque "epjit::launch_dependent_grids"
// SM90: call_opaque "epjit::wait_for_prior_grid"
// SM90-NEXT: if
// SM90: call_opaque "epjit::warp_prefetch"
ep.kernel @prefetch_first(%x: !ep.ptr<i32>, %n: index) warps_per_block(1) {
  %c0 = arith.constant 0 : index
  %some = arith.cmpi ne, %n, %c0 : index
  scf.if %some {
    ep.prefetch %x[%c0] : !ep.ptr<i32>
  }
  %v = ep.load %x[%n] : !ep.ptr<i32>
  ep.store %v, %x[%c0] : !ep.ptr<i32>
}
