// ep-lower-warp-ops: SIMT with the target's wave width on GPUs (MX blocks of
// 32 = 4 lanes of 8 elements, wave/4 blocks per pass), lane loops on the host.
// RUN: epjit-opt %s --ep-check-target=target=gfx950 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,SIMT,GFX950
// RUN: epjit-opt %s --ep-check-target=target=gfx1250 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,SIMT,GFX1250
// RUN: epjit-opt %s --ep-check-target=target=gfx942 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,SIMT,GFX942
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,SIMT,SM90
// RUN: epjit-opt %s --ep-check-target=target=host-gfx950 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse | FileCheck %s --check-prefixes=CHECK,HOST
// RUN: not epjit-opt %s --ep-check-target=target=gfx950 --ep-lower-warp-ops 2>&1 | FileCheck %s --check-prefix=ORDER

// GFX950: module attributes {ep.lowering = "simt"
// GFX1250: module attributes {ep.lowering = "simt"
// HOST: module attributes {ep.lowering = "lanes"
// ORDER: error: no conversion method: run ep-lower-numerics before ep-lower-warp-ops

// CHECK-LABEL: func.func @blockwise
// CHECK-NOT: ep.warp.
// SIMT: %[[LANE:.*]] = ep.lane.id : index
// GFX950: scf.for {{.*}} step %c4
// GFX942: scf.for {{.*}} step %c4
// GFX1250: scf.for {{.*}} step %c2
// SM90: scf.for {{.*}} step %c2
// SIMT: ep.lane.chunk_reduce absmax {{.*}} chunk(8)
// SIMT: ep.lane.reduce max %{{.*}} group(16) : f32
// SIMT: ep.blockwise_scale
// SIMT: scf.if
// SIMT: ep.store
// SIMT: ep.lane.quantize_chunk {{.*}} scale %{{.*}} : f32 {aligned = false, chunk = 8 : i64
// HOST-NOT: ep.lane.id
// HOST-NOT: ep.lane.reduce
// HOST: scf.for
// HOST: ep.lane.chunk_reduce absmax
// HOST: ep.lane.combine max
// HOST: ep.blockwise_scale
// HOST: ep.lane.quantize_chunk {{.*}}method = #ep.method<software>
func.func @blockwise(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%c0] {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// A direct cast on a row known to be chunk-aligned: one lane per chunk.
// CHECK-LABEL: func.func @direct_aligned
// GFX950: scf.for {{.*}} step %c64
// GFX1250: scf.for {{.*}} step %c32
// CHECK: ep.lane.quantize_chunk {{.*}}{aligned = true, chunk = 8 : i64
func.func @direct_aligned(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %t: index) {
  %c7168 = arith.constant 7168 : index
  %row = arith.muli %t, %c7168 : index
  ep.warp.quantize %x[%row], %q[%row], %c7168 {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  return
}

// A row reduction: SIMT butterflies across the whole wave; the host combines
// lanes in order (max is exact in any order).
// CHECK-LABEL: func.func @row_max
// GFX950: ep.lane.reduce max %{{.*}} group(64)
// GFX1250: ep.lane.reduce max %{{.*}} group(32)
// HOST: ep.lane.combine max
// CHECK: ep.store
func.func @row_max(%x: !ep.ptr<f32>, %out: !ep.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %m = ep.warp.reduce max %x[%c0], %n : !ep.ptr<f32> -> f32
  ep.store %m, %out[%c0] : !ep.ptr<f32>
  return
}
