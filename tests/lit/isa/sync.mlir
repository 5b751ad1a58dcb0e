// Every warp-uniform scalar operation (window addressing, atomics, waits,
// fences, barriers) compiled to real binaries on every target. Atomics are
// performed once per warp (lane 0) and their result broadcast.
// RUN: epjit-compile --input %s --target gfx942 --emit asm | FileCheck %s --check-prefix=GFX942
// RUN: epjit-compile --input %s --target gfx950 --emit asm | FileCheck %s --check-prefix=GFX950
// RUN: epjit-compile --input %s --target gfx1250 --emit asm | FileCheck %s --check-prefix=GFX1250
// RUN: epjit-compile --input %s --target sm90 --emit asm | FileCheck %s --check-prefix=SM90
// RUN: epjit-compile --input %s --target host --emit asm | FileCheck %s --check-prefix=HOST

// GFX942: {{flat|global}}_atomic_add
// GFX942: global_atomic_smax
// GFX942: global_atomic_swap
// GFX942: global_atomic_add_x2
// GFX942: s_memrealtime
// GFX942: s_sleep
// GFX942: s_barrier
// GFX942: <block_vote>:
// GFX942: ds_write_b32
// GFX942: s_barrier
// GFX942: ds_read_b32
// GFX942: ; resources sync_ops: wave 64 {{.*}} lds 0 scratch 0 code
// GFX942: ; resources block_vote: wave 64 {{.*}} lds 4 scratch 0 code
// GFX950: {{flat|global}}_atomic_add
// GFX950: ; resources sync_ops: wave 64 {{.*}} lds 0 scratch 0 code
// GFX950: ; resources block_vote: wave 64 {{.*}} lds 4 scratch 0 code
// GFX1250: {{flat|global}}_atomic_add
// GFX1250: s_sendmsg_rtn_b64 {{.*}}sendmsg(MSG_RTN_GET_REALTIME)
// GFX1250: <block_vote>:
// GFX1250: s_barrier_signal
// GFX1250: ds_load_b32
// GFX1250: ; resources sync_ops: wave 32 {{.*}} lds 0 scratch 0 code
// GFX1250: ; resources block_vote: wave 32 {{.*}} lds 4 scratch 0 code
// Ordering is carried by the instruction (PTX ISA 7.0 memory model), not by
// a separate membar around a relaxed access.
// SM90-NOT: membar
// SM90: atom.acq_rel.sys.add.s32
// SM90: atom.relaxed.sys.max.s32
// SM90: atom.release.sys.exch.b32
// SM90: atom.relaxed.gpu.add.u64
// SM90: fence.acq_rel.sys
// SM90: st.release.sys.b32
// SM90: ld.acquire.sys.b32
// SM90: nanosleep
// SM90: %globaltimer
// SM90: ld.acquire.gpu.b32
// SM90: bar.sync
// SM90: bar.warp.sync -1
// SM90-NOT: membar
// SM90: bar.red.or.pred
// SM90: ; resources block_vote: registers {{.*}} stack 0
// SM90: ; resources sync_ops: registers
// HOST: sync_ops__epjit_host_entry
// HOST: block_vote__epjit_host_entry
ep.constant @error_timeout = 3 : i32

ep.window_region @recv_tokens : i32 {
  %c = arith.constant 64 : index
  ep.yield %c : index
}
ep.window_region @recv_counts : i32 {
  %c = arith.constant 64 : index
  ep.yield %c : index
}

ep.kernel @sync_ops(%flags: !ep.ptr<i32>, %counters: !ep.ptr<i64>, %errors: !ep.ptr<i32>, %w: !ep.window,
                    %out: !ep.ptr<i32>) warps_per_block(2) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %big = arith.constant 1 : i64
  %warp = ep.global_warp_index : index
  %rank = ep.block_index : index
  %peer = ep.peer_ptr %w[%rank] @recv_counts[%warp] : !ep.ptr<i32>
  %slot = ep.atomic_rmw add %peer[%c0], %one scope(system) order(acq_rel) : !ep.ptr<i32>
  %most = ep.atomic_rmw max %flags[%c1], %slot scope(system) order(relaxed) : !ep.ptr<i32>
  %old = ep.atomic_rmw exchange %flags[%warp], %most scope(system) order(release) : !ep.ptr<i32>
  %wide = ep.atomic_rmw add %counters[%c0], %big scope(agent) order(relaxed) : !ep.ptr<i64>
  ep.fence scope(system) order(release)
  ep.atomic_store %old, %flags[%c0] scope(system) order(release) : !ep.ptr<i32>
  %timeout = ep.constant_value @error_timeout : i32
  %limit = ep.load %errors[%c1] : !ep.ptr<i32>
  %ok = ep.wait_until %flags[%c1] ge %one scope(system) timeout_ms(%limit) error(%errors[%c0], %timeout)
      : !ep.ptr<i32>, !ep.ptr<i32>
  %seen = ep.atomic_load %flags[%c1] scope(agent) order(acquire) : !ep.ptr<i32>
  ep.block_barrier
  ep.warp_barrier
  ep.store %seen, %out[%warp] : !ep.ptr<i32>
}

// A block's vote: the barrier's own reduction on NVIDIA (no shared memory),
// one word of LDS between barriers on AMD, the launcher's word on the host.
ep.kernel @block_vote(%flags: !ep.ptr<i32>, %out: !ep.ptr<i32>) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %warp = ep.global_warp_index : index
  %flag = ep.load %flags[%warp] : !ep.ptr<i32>
  %raised = arith.cmpi ne, %flag, %zero : i32
  %any = ep.block_any %raised
  %seen = arith.extui %any : i1 to i32
  ep.store %seen, %out[%warp] : !ep.ptr<i32>
}
