// Every ep op parses, verifies and prints back what it parsed, in its custom
// form and from the generic form.
// RUN: epjit-opt %s | epjit-opt | FileCheck %s
// RUN: epjit-opt %s --mlir-print-op-generic | epjit-opt | FileCheck %s

// CHECK: ep.param @hidden : index {min = 1 : i64, multiple_of = 2 : i64}
ep.param @hidden : index {min = 1, multiple_of = 2}
// CHECK: ep.param @experts : i32 {default_value = 8 : i32}
ep.param @experts : i32 {default_value = 8 : i32}
// CHECK: ep.param @quant : index {names = ["none", "direct"]}
ep.param @quant : index {names = ["none", "direct"]}
// CHECK: ep.constant @state_error = 3 : index
ep.constant @state_error = 3 : index
// CHECK: ep.constant @error_timeout = 1 : i32
ep.constant @error_timeout = 1 : i32
// CHECK: ep.include "ep/common"
ep.include "ep/common"
// CHECK: ep.window_region @recv_tokens : bf16 {
// CHECK-NEXT: %[[H:.*]] = ep.param_value @hidden : index
// CHECK-NEXT: ep.yield %[[H]] : index
ep.window_region @recv_tokens : bf16 {
  %h = ep.param_value @hidden : index
  ep.yield %h : index
}

// The kernel keeps its parameters' names: they are its interface.
// CHECK-LABEL: ep.kernel @scalars(%p: !ep.ptr<i32>, %w: !ep.window, %n: index) warps_per_block(4) {
ep.kernel @scalars(%p: !ep.ptr<i32>, %w: !ep.window, %n: index) warps_per_block(4) {
  // CHECK: ep.param_value @hidden : index
  %h = ep.param_value @hidden : index
  // CHECK: ep.param_value @experts : i32
  %e = ep.param_value @experts : i32
  // CHECK: ep.warp_index : index
  %0 = ep.warp_index : index
  // CHECK: ep.global_warp_index : index
  %1 = ep.global_warp_index : index
  // CHECK: ep.global_warp_count : index
  %2 = ep.global_warp_count : index
  // CHECK: ep.block_index : index
  %3 = ep.block_index : index
  // CHECK: ep.block_count : index
  %4 = ep.block_count : index
  // CHECK: %[[Q:.*]] = ep.ptr_add %{{.*}}, %{{.*}} : !ep.ptr<i32>
  %q = ep.ptr_add %p, %0 : !ep.ptr<i32>
  // CHECK: %[[V:.*]] = ep.load %[[Q]][%{{.*}}] : !ep.ptr<i32>
  %v = ep.load %q[%1] : !ep.ptr<i32>
  // CHECK: ep.store %[[V]], %{{.*}}[%{{.*}}] : !ep.ptr<i32>
  ep.store %v, %p[%2] : !ep.ptr<i32>
  // CHECK: ep.peer_ptr %{{.*}}[%{{.*}}] @recv_tokens[%{{.*}}] : !ep.ptr<bf16>
  %peer = ep.peer_ptr %w[%3] @recv_tokens[%4] : !ep.ptr<bf16>
  // CHECK: ep.atomic_rmw add %{{.*}}[%{{.*}}], %{{.*}} scope(system) order(acq_rel) : !ep.ptr<i32>
  %old = ep.atomic_rmw add %p[%0], %v scope(system) order(acq_rel) : !ep.ptr<i32>
  // CHECK: ep.atomic_load %{{.*}}[%{{.*}}] scope(agent) order(acquire) : !ep.ptr<i32>
  %a = ep.atomic_load %p[%0] scope(agent) order(acquire) : !ep.ptr<i32>
  // CHECK: ep.atomic_store %{{.*}}, %{{.*}}[%{{.*}}] scope(system) order(release) : !ep.ptr<i32>
  ep.atomic_store %a, %p[%0] scope(system) order(release) : !ep.ptr<i32>
  // CHECK: ep.fence scope(workgroup) order(acq_rel)
  ep.fence scope(workgroup) order(acq_rel)
  // CHECK: ep.prefetch %{{.*}}[%{{.*}}] : !ep.ptr<i32>
  ep.prefetch %q[%1] : !ep.ptr<i32>
  // CHECK: ep.constant_value @state_error : index
  %err = ep.constant_value @state_error : index
  // CHECK: ep.constant_value @error_timeout : i32
  %code = ep.constant_value @error_timeout : i32
  // CHECK: ep.wait_until %{{.*}}[%{{.*}}] ge %{{.*}} scope(system) timeout_ms(%{{.*}}) error(%{{.*}}[%{{.*}}], %{{.*}}) : !ep.ptr<i32>, !ep.ptr<i32>
  %ok = ep.wait_until %p[%0] ge %v scope(system) timeout_ms(%v) error(%p[%err], %code) : !ep.ptr<i32>, !ep.ptr<i32>
  // CHECK: ep.block_barrier
  ep.block_barrier
  // CHECK: %{{.*}} = ep.block_any %{{.*}}
  %any = ep.block_any %ok
  // CHECK: ep.warp_barrier
  ep.warp_barrier
  ep.return
}

// CHECK-LABEL: ep.kernel @warp_ops
ep.kernel @warp_ops(%x: !ep.ptr<bf16>, %f: !ep.ptr<f32>, %q: !ep.ptr<i8>, %s: !ep.ptr<i8>, %fs: !ep.ptr<f32>,
                    %n: index, %w: f32, %err: !ep.ptr<i32>) warps_per_block(1) {
  %c0 = arith.constant 0 : index
  // CHECK: ep.warp.copy_row %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<bf16> -> !ep.ptr<f32>
  ep.warp.copy_row %x[%c0], %f[%c0], %n : !ep.ptr<bf16> -> !ep.ptr<f32>
  // CHECK: ep.warp.reduce absmax %{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<bf16> -> f32
  %m = ep.warp.reduce absmax %x[%c0], %n : !ep.ptr<bf16> -> f32
  // CHECK: ep.warp.quantize %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  ep.warp.quantize %x[%c0], %q[%c0], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  // CHECK: ep.warp.quantize {{.*}} scales %{{.*}}[%{{.*}}] {block = 128 : i64, format = #ep.fp8<e4m3fnuz>, scale = #ep.scale<f32>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  ep.warp.quantize %x[%c0], %q[%c0], %n scales %fs[%c0] {format = #ep.fp8<e4m3fnuz>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  // CHECK: ep.warp.quantize {{.*}} {block = 32 : i64, format = #ep.fp4<e2m1>, scale = #ep.scale<e8m0>, software_fallback} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  ep.warp.quantize %x[%c0], %q[%c0], %n scales %s[%c0] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>, software_fallback} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  // CHECK: ep.warp.quantize {{.*}} scales %{{.*}}[%{{.*}}] scales_stride %{{.*}} {block = 128 : i64, format = #ep.fp8<e4m3fn>, scale = #ep.scale<deepep_ue8m0>, scales_group = 4 : i64} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  ep.warp.quantize %x[%c0], %q[%c0], %n scales %s[%c0] scales_stride %n {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_ue8m0>, scales_group = 4} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  // CHECK: %{{.*}}, %{{.*}} = ep.deepep_scale %{{.*}} {scale = #ep.scale<deepep_pow2>} : f32
  %stored, %factor = ep.deepep_scale %m {scale = #ep.scale<deepep_pow2>} : f32
  // CHECK: ep.warp.dequantize {{.*}} {block = 32 : i64, format = #ep.fp4<e2m1>, scale = #ep.scale<e8m0>} : !ep.ptr<i8> -> !ep.ptr<f32>, !ep.ptr<i8>
  ep.warp.dequantize %q[%c0], %f[%c0], %n scales %s[%c0] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>} : !ep.ptr<i8> -> !ep.ptr<f32>, !ep.ptr<i8>
  // CHECK: ep.warp.accumulate %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} weight %{{.*}} : !ep.ptr<bf16> -> !ep.ptr<f32>
  ep.warp.accumulate %x[%c0], %f[%c0], %n weight %w : !ep.ptr<bf16> -> !ep.ptr<f32>
  %c2 = arith.constant 2 : index
  %true = arith.constant true
  // CHECK: ep.warp.sum_rows %{{.*}}[%{{.*}}], %{{.*}}, sources(%{{.*}}) : !ep.ptr<bf16> {
  // CHECK: ^bb0(%{{.*}}: index):
  // CHECK: ep.source %{{.*}}, %{{.*}} : !ep.ptr<f32>
  ep.warp.sum_rows %x[%c0], %n, sources(%c2) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %row = ep.ptr_add %f, %j : !ep.ptr<f32>
    ep.source %true, %row : !ep.ptr<f32>
  }
  // CHECK: ep.warp.sum_rows {{.*}} {block = 128 : i64, format = #ep.fp8<target>, scale = #ep.scale<f32>} : !ep.ptr<f32> {
  // CHECK: ep.source %{{.*}}, %{{.*}} scales %{{.*}} : !ep.ptr<i8>, !ep.ptr<f32>
  ep.warp.sum_rows %f[%c0], %n, sources(%c2) {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<f32> {
  ^bb0(%j: index):
    ep.source %true, %q scales %fs : !ep.ptr<i8>, !ep.ptr<f32>
  }
  // Flagged rows: the low-latency combine's lines.
  %flag = arith.constant 7 : i32
  %limit = arith.constant 100 : i32
  // CHECK: ep.warp.copy_row %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} flagged(%{{.*}}) : !ep.ptr<bf16> -> !ep.ptr<bf16>
  ep.warp.copy_row %x[%c0], %x[%n], %n flagged(%flag) : !ep.ptr<bf16> -> !ep.ptr<bf16>
  // CHECK: ep.warp.sum_rows %{{.*}}[%{{.*}}], %{{.*}}, sources(%{{.*}}) flagged(%{{.*}}) error(%{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<i32>) timeout_ms(%{{.*}}) : !ep.ptr<f32> {
  ep.warp.sum_rows %f[%c0], %n, sources(%c2) flagged(%flag) error(%err[%c0], %flag : !ep.ptr<i32>) timeout_ms(%limit) : !ep.ptr<f32> {
  ^bb0(%j: index):
    ep.source %true, %x : !ep.ptr<bf16>
  }
  // CHECK: ep.source %{{.*}}, %{{.*}} unflagged(%{{.*}}) : !ep.ptr<bf16>
  ep.warp.sum_rows %f[%c0], %n, sources(%c2) flagged(%flag) error(%err[%c0], %flag : !ep.ptr<i32>) timeout_ms(%limit) : !ep.ptr<f32> {
  ^bb0(%j: index):
    ep.source %true, %x unflagged(%true) : !ep.ptr<bf16>
  }
  // CHECK: ep.warp.fanout_row %{{.*}}[%{{.*}}], %{{.*}}, destinations(%{{.*}}) : !ep.ptr<bf16> {
  // CHECK: ep.destination %{{.*}}, %{{.*}} : !ep.ptr<bf16>
  ep.warp.fanout_row %x[%c0], %n, destinations(%c2) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %row = ep.ptr_add %x, %j : !ep.ptr<bf16>
    ep.destination %true, %row : !ep.ptr<bf16>
  }
  // CHECK: %{{.*}}:2 = ep.warp.copy_row_around %{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<bf16> -> index, i1 {
  // CHECK: ep.block_barrier
  // CHECK: ep.copy_to %{{.*}}, %{{.*}} : !ep.ptr<bf16> yield %{{.*}}, %{{.*}} : index, i1
  %slot, %fits = ep.warp.copy_row_around %x[%c0], %n : !ep.ptr<bf16> -> index, i1 {
    ep.block_barrier
    %row = ep.ptr_add %x, %n : !ep.ptr<bf16>
    ep.copy_to %true, %row : !ep.ptr<bf16> yield %n, %true : index, i1
  }
  // CHECK: ep.warp.copy_row_around %{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<bf16> {
  // CHECK: ep.copy_to %{{.*}}, %{{.*}} : !ep.ptr<bf16>{{$}}
  ep.warp.copy_row_around %x[%c0], %n : !ep.ptr<bf16> {
    ep.copy_to %fits, %x : !ep.ptr<bf16>
  }
  // CHECK: %{{.*}} = ep.warp.copy_row_around %{{.*}}[%{{.*}}], %{{.*}} : !ep.ptr<bf16> -> index {
  // CHECK: ep.copy_to %{{.*}}, %{{.*}} flagged(%{{.*}}) : !ep.ptr<bf16> yield %{{.*}} : index
  %box = ep.warp.copy_row_around %x[%c0], %n : !ep.ptr<bf16> -> index {
    ep.copy_to %fits, %x flagged(%flag) : !ep.ptr<bf16> yield %n : index
  }
  ep.return
}

// CHECK-LABEL: func.func @lane_primitives
func.func @lane_primitives(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  // CHECK: ep.lane.id : index
  %lane = ep.lane.id : index
  // CHECK: %[[HELD:.*]] = ep.lane.hold_chunks %{{.*}}, %{{.*}} at %{{.*}} stride %{{.*}} {aligned = true, chunk = 8 : i64} : !ep.ptr<bf16> -> !ep.held_chunks<8>
  // CHECK: ep.lane.put_chunks %[[HELD]], %{{.*}}, %{{.*}}, %{{.*}} at %{{.*}} stride %{{.*}} {aligned = true, chunk = 8 : i64} : !ep.held_chunks<8>, !ep.ptr<bf16> -> !ep.ptr<bf16>
  %held = ep.lane.hold_chunks %x, %n at %lane stride %n {chunk = 8, aligned = true} : !ep.ptr<bf16> -> !ep.held_chunks<8>
  ep.lane.put_chunks %held, %x, %x, %n at %lane stride %n {chunk = 8, aligned = true} : !ep.held_chunks<8>, !ep.ptr<bf16> -> !ep.ptr<bf16>
  // CHECK: ep.lane.chunk_reduce absmax %{{.*}}[%{{.*}}], %{{.*}} chunk(8) : !ep.ptr<bf16> -> f32
  %p = ep.lane.chunk_reduce absmax %x[%lane], %n chunk(8) : !ep.ptr<bf16> -> f32
  // CHECK: ep.lane.reduce max %{{.*}} group(16) : f32
  %m = ep.lane.reduce max %p group(16) : f32
  // CHECK: ep.lane.combine max %{{.*}}, %{{.*}} : f32
  %c = ep.lane.combine max %p, %m : f32
  // CHECK: ep.mx_scale %{{.*}} {format = #ep.fp4<e2m1>} : i8
  %e = ep.mx_scale %c {format = #ep.fp4<e2m1>} : i8
  // CHECK: ep.blockwise_scale %{{.*}} {format = #ep.fp8<e4m3fn>} : f32
  %s = ep.blockwise_scale %c {format = #ep.fp8<e4m3fn>} : f32
  // CHECK: ep.lane.quantize_chunk %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}], %{{.*}} scale %{{.*}} : i8 {aligned = true, chunk = 8 : i64, format = #ep.fp4<e2m1>, method = #ep.method<amdgcn_scalef32_pk8_fp4>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  ep.lane.quantize_chunk %x[%lane], %q[%lane], %n scale %e : i8 {format = #ep.fp4<e2m1>, method = #ep.method<amdgcn_scalef32_pk8_fp4>, chunk = 8, aligned = true} : !ep.ptr<bf16> -> !ep.ptr<i8>
  // CHECK: ep.lane.dequantize_chunk {{.*}} {aligned = false, chunk = 8 : i64, format = #ep.fp8<e4m3fn>, method = #ep.method<software>} : !ep.ptr<i8> -> !ep.ptr<bf16>
  ep.lane.dequantize_chunk %q[%lane], %x[%lane], %n {format = #ep.fp8<e4m3fn>, method = #ep.method<software>, chunk = 8, aligned = false} : !ep.ptr<i8> -> !ep.ptr<bf16>
  // CHECK: ep.lane.copy_chunks %{{.*}}, %{{.*}}, %{{.*}} at %{{.*}} stride %{{.*}} {aligned = true, chunk = 8 : i64, unroll = 4 : i64} : !ep.ptr<bf16> -> !ep.ptr<bf16>
  ep.lane.copy_chunks %x, %x, %n at %lane stride %n {chunk = 8, unroll = 4, aligned = true} : !ep.ptr<bf16> -> !ep.ptr<bf16>
  // CHECK: ep.lane.sum_chunk %{{.*}}[%{{.*}}], %{{.*}} valid(%{{.*}}) rows(%{{.*}} : !ep.ptr<bf16>) {aligned = false, chunk = 8 : i64} : !ep.ptr<bf16>
  %true = arith.constant true
  ep.lane.sum_chunk %x[%lane], %n valid(%true) rows(%x : !ep.ptr<bf16>) {chunk = 8, aligned = false} : !ep.ptr<bf16>
  // CHECK: ep.lane.sum_chunks %{{.*}}[%{{.*}}], %{{.*}} stride %{{.*}} valid(%{{.*}}) rows(%{{.*}} : !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64, unroll = 4 : i64} : !ep.ptr<bf16>
  ep.lane.sum_chunks %x[%lane], %n stride %n valid(%true) rows(%x : !ep.ptr<bf16>) {chunk = 8, unroll = 4, aligned = true} : !ep.ptr<bf16>
  // CHECK: ep.lane.fanout_chunks %{{.*}}, %{{.*}} at %{{.*}} stride %{{.*}} live(%{{.*}}, %{{.*}}) rows(%{{.*}}, %{{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64, unroll = 8 : i64} : !ep.ptr<bf16>
  ep.lane.fanout_chunks %x, %n at %lane stride %n live(%true, %true) rows(%x, %x : !ep.ptr<bf16>, !ep.ptr<bf16>) {chunk = 8, unroll = 8, aligned = true} : !ep.ptr<bf16>
  // CHECK: ep.lane.load %{{.*}}[%{{.*}}] : !ep.ptr<i8>
  %byte = ep.lane.load %q[%lane] : !ep.ptr<i8>
  return
}
