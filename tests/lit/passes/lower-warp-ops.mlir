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

// DeepEP's cast: a NaN-ignoring amax, ep.deepep_scale's stored scale at
// column-major places (offset + block * stride; UE8M0 bytes in groups of
// four: offset + block / 4 * stride + block % 4), the elements multiplied by
// its factor. gfx942 converts OCP E4M3 in software (software_fallback).
// CHECK-LABEL: func.func @deepep_cast
// CHECK-NOT: ep.warp.
// SIMT: ep.lane.chunk_reduce absmaxnum {{.*}} chunk(8)
// SIMT: %[[STORED:.*]], %[[FACTOR:.*]] = ep.deepep_scale %{{.*}} {scale = #ep.scale<deepep>} : f32
// SIMT: %[[COLUMN:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// SIMT: ep.store %[[STORED]], %{{.*}}[%{{.*}}] : !ep.ptr<f32>
// GFX950: ep.lane.quantize_chunk {{.*}} scale %[[FACTOR]] : f32 {{{.*}}method = #ep.method<amdgcn_pk_fp8>, multiplies}
// GFX942: ep.lane.quantize_chunk {{.*}} scale %[[FACTOR]] : f32 {{{.*}}method = #ep.method<software>, multiplies}
// SM90: ep.lane.quantize_chunk {{.*}} scale %[[FACTOR]] : f32 {{{.*}}method = #ep.method<ptx_cvt_satfinite>, multiplies}
// HOST: ep.lane.chunk_reduce absmaxnum
// HOST: ep.deepep_scale %{{.*}} {scale = #ep.scale<deepep>} : f32
// HOST: ep.lane.quantize_chunk {{.*}}multiplies
// CHECK-LABEL: func.func @deepep_cast_ue8m0
// CHECK: ep.deepep_scale %{{.*}} {scale = #ep.scale<deepep_ue8m0>} : i8
// CHECK: arith.divui %{{.*}}, %c4
// CHECK: arith.remui %{{.*}}, %c4
// CHECK: ep.store %{{.*}} : !ep.ptr<i8>
func.func @deepep_cast(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index, %tokens: index) {
  %c0 = arith.constant 0 : index
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%c0] scales_stride %tokens
      {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep>, software_fallback}
      : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}
func.func @deepep_cast_ue8m0(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<i8>, %n: index, %bytes: index) {
  %c0 = arith.constant 0 : index
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%c0] scales_stride %bytes
      {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_ue8m0>, scales_group = 4, software_fallback}
      : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
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

// A sum of 3 rows: the body is cloned once per source, so every source's row
// is known before the lanes load; one lane chunk is 16 bytes of each source
// (8 bf16 elements). Each lane sums chunks lane, lane + wave, ..., taking as
// many at once as keep the target's copy_loads_in_flight loads in flight:
// one at a time where 3 sources fill its 4 (AMD, host-gfx950), two at a time
// (sum_chunks, stride wave * 8 elements) within sm90's 8.
// CHECK-LABEL: func.func @sum_three
// CHECK-NOT: ep.warp.sum_rows
// CHECK-NOT: ep.source
// SIMT: ep.lane.id
// GFX950: scf.for {{.*}} step %c64
// GFX950: ep.lane.sum_chunk {{.*}} valid({{.*}}, {{.*}}, {{.*}}) rows({{.*}}, {{.*}}, {{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>, !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64}
// GFX942: scf.for {{.*}} step %c64
// GFX942: ep.lane.sum_chunk {{.*}} {aligned = true, chunk = 8 : i64}
// GFX1250: scf.for {{.*}} step %c32
// GFX1250: ep.lane.sum_chunk {{.*}} {aligned = true, chunk = 8 : i64}
// SM90: scf.for {{.*}} step %c64
// SM90: ep.lane.sum_chunks {{.*}} stride %c256 valid({{.*}}, {{.*}}, {{.*}}) rows({{.*}}, {{.*}}, {{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>, !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64, unroll = 2 : i64}
// HOST: scf.for
// HOST: scf.for
// HOST: ep.lane.sum_chunk {{.*}} rows({{.*}}, {{.*}}, {{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>, !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64}
func.func @sum_three(%rows: !ep.ptr<bf16>, %live: !ep.ptr<i32>, %out: !ep.ptr<bf16>, %t: index) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c7168 = arith.constant 7168 : index
  %zero = arith.constant 0 : i32
  %at = arith.muli %t, %c7168 : index
  ep.warp.sum_rows %out[%at], %c7168, sources(%c3) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %flag = ep.load %live[%j] : !ep.ptr<i32>
    %valid = arith.cmpi ne, %flag, %zero : i32
    %offset = arith.muli %j, %c7168 : index
    %row = ep.ptr_add %rows, %offset : !ep.ptr<bf16>
    ep.source %valid, %row : !ep.ptr<bf16>
  }
  return
}

// Flagged rows (the low-latency combine): a copy into lines keeps the
// target's copy_loads_in_flight chunks per lane (its `aligned` speaks of the
// source); a sum of flagged sources always steps by chunks, two lines each,
// as many at once as fit copy_loads_in_flight lines: 2 sources take 1 chunk
// at a time on AMD (4), 2 on sm90 (8); the wait's operands carried along.
// CHECK-LABEL: func.func @flagged
// CHECK-NOT: ep.warp.
// GFX942: ep.lane.copy_chunks {{.*}} stride %c512 flagged(%{{.*}}) {aligned = true, chunk = 8 : i64, unroll = 4 : i64}
// SM90: ep.lane.copy_chunks {{.*}} stride %c256 flagged(%{{.*}}) {aligned = true, chunk = 8 : i64, unroll = 8 : i64}
// HOST: ep.lane.copy_chunks {{.*}} flagged(%{{.*}}) {aligned = true, chunk = 8 : i64, unroll = 4 : i64}
// GFX942: ep.lane.sum_chunks {{.*}} rows({{.*}}, {{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>) flagged(%{{.*}}) error(%{{.*}}[%c3], %{{.*}} : !ep.ptr<i32>) timeout_ms(%{{.*}}) {aligned = true, chunk = 8 : i64, unroll = 1 : i64}
// SM90: ep.lane.sum_chunks {{.*}} flagged(%{{.*}}) error(%{{.*}}[%c3], %{{.*}} : !ep.ptr<i32>) timeout_ms(%{{.*}}) {aligned = true, chunk = 8 : i64, unroll = 2 : i64}
// HOST: ep.lane.sum_chunks {{.*}} flagged(%{{.*}}) error
func.func @flagged(%rows: !ep.ptr<bf16>, %lines: !ep.ptr<bf16>, %state: !ep.ptr<i32>, %out: !ep.ptr<bf16>,
                   %epoch: i32, %limit: i32) {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c7168 = arith.constant 7168 : index
  %c14336 = arith.constant 14336 : index
  %true = arith.constant true
  %code = arith.constant 1 : i32
  ep.warp.copy_row %rows[%c7168], %lines[%c14336], %c7168 flagged(%epoch) : !ep.ptr<bf16> -> !ep.ptr<bf16>
  ep.warp.sum_rows %out[%c7168], %c7168, sources(%c2) flagged(%epoch) error(%state[%c3], %code : !ep.ptr<i32>)
      timeout_ms(%limit) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %offset = arith.muli %j, %c14336 : index
    %row = ep.ptr_add %lines, %offset : !ep.ptr<bf16>
    ep.source %true, %row : !ep.ptr<bf16>
  }
  return
}

// Every source's body runs before the first row is read, so a body may wait
// once its sources are named (combine's sums meet the other ranks after the
// last source): both flags' loads, then the barrier, then the lanes' reads.
// CHECK-LABEL: func.func @sum_waits_after_naming
// CHECK: ep.load %{{.*}}[%c0]
// CHECK: ep.load %{{.*}}[%c1]
// CHECK-NOT: ep.lane
// CHECK: ep.block_barrier
// CHECK-NOT: ep.block_barrier
// CHECK: ep.lane.sum_chunk
func.func @sum_waits_after_naming(%rows: !ep.ptr<bf16>, %live: !ep.ptr<i32>, %out: !ep.ptr<bf16>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c7168 = arith.constant 7168 : index
  %zero = arith.constant 0 : i32
  ep.warp.sum_rows %out[%c7168], %c7168, sources(%c2) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %flag = ep.load %live[%j] : !ep.ptr<i32>
    %valid = arith.cmpi ne, %flag, %zero : i32
    %offset = arith.muli %j, %c7168 : index
    %row = ep.ptr_add %rows, %offset : !ep.ptr<bf16>
    %last = arith.cmpi eq, %j, %c1 : index
    scf.if %last {
      ep.block_barrier
    }
    ep.source %valid, %row : !ep.ptr<bf16>
  }
  return
}

// fp8 blockwise sources decode with the target's method; an unaligned
// destination (offset not a multiple of 16 bytes) keeps scalar stores. Two
// sources: two chunks at once (fp8 chunks are 16 elements: never more than two,
// or the f32 sums spill).
// CHECK-LABEL: func.func @sum_fp8_blockwise
// GFX950: ep.lane.sum_chunks {{.*}} stride %c1024 {{.*}} scales({{.*}}) {aligned = false, block = 128 : i64, chunk = 16 : i64, format = #ep.fp8<e4m3fn>, method = #ep.method<amdgcn_pk_fp8>, unroll = 2 : i64}
// GFX942: ep.lane.sum_chunks {{.*}} format = #ep.fp8<e4m3fnuz>, method = #ep.method<amdgcn_pk_fp8>, unroll = 2 : i64
// SM90: ep.lane.sum_chunks {{.*}} stride %c512 {{.*}} format = #ep.fp8<e4m3fn>, method = #ep.method<ptx_cvt_satfinite>, unroll = 2 : i64
// HOST: ep.lane.sum_chunks {{.*}} format = #ep.fp8<e4m3fn>, method = #ep.method<software>, unroll = 2 : i64
func.func @sum_fp8_blockwise(%codes: !ep.ptr<i8>, %scales: !ep.ptr<f32>, %out: !ep.ptr<f32>, %n: index) {
  %true = arith.constant true
  %c2 = arith.constant 2 : index
  ep.warp.sum_rows %out[%n], %n, sources(%c2) {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<f32> {
  ^bb0(%j: index):
    %row = ep.ptr_add %codes, %j : !ep.ptr<i8>
    %s = ep.ptr_add %scales, %j : !ep.ptr<f32>
    ep.source %true, %row scales %s : !ep.ptr<i8>, !ep.ptr<f32>
  }
  return
}

// A row copy keeps the target's copy_loads_in_flight chunks per lane (4 on
// AMD, 8 on sm90): a step covers wave * that many chunks on GPUs, one lane
// at a time on the host (host-gfx950 copies as gfx950 does).
// CHECK-LABEL: func.func @copy_row
// GFX950: scf.for {{.*}} step %c256
// SM90: scf.for {{.*}} step %c256
// GFX950: ep.lane.copy_chunks {{.*}} stride %c{{[0-9]+}} {aligned = true, chunk = 8 : i64, unroll = 4 : i64} : !ep.ptr<bf16> -> !ep.ptr<bf16>
// SM90: ep.lane.copy_chunks {{.*}} stride %c{{[0-9]+}} {aligned = true, chunk = 8 : i64, unroll = 8 : i64} : !ep.ptr<bf16> -> !ep.ptr<bf16>
// HOST: ep.lane.copy_chunks {{.*}} {aligned = true, chunk = 8 : i64, unroll = 4 : i64}
func.func @copy_row(%x: !ep.ptr<bf16>, %y: !ep.ptr<bf16>, %t: index) {
  %c7168 = arith.constant 7168 : index
  %row = arith.muli %t, %c7168 : index
  ep.warp.copy_row %x[%row], %y[%row], %c7168 : !ep.ptr<bf16> -> !ep.ptr<bf16>
  return
}

// A difference of multiples is a multiple (the std-MoE pack's other counts
// buffer, c - parity * c); a difference with an unknown term is not.
// CHECK-LABEL: func.func @copy_difference
// CHECK: ep.lane.copy_chunks {{.*}}aligned = true
// CHECK: ep.lane.copy_chunks {{.*}}aligned = false
func.func @copy_difference(%x: !ep.ptr<i32>, %parity: index, %n: index) {
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %counting = arith.muli %parity, %c32 : index
  %other = arith.subi %c32, %counting : index
  ep.warp.copy_row %x[%c64], %x[%other], %c32 : !ep.ptr<i32> -> !ep.ptr<i32>
  %unknown = arith.subi %c32, %n : index
  ep.warp.copy_row %x[%c64], %x[%unknown], %c32 : !ep.ptr<i32> -> !ep.ptr<i32>
  return
}

// Narrowed ids (i64 -> i32) go element by element even at aligned offsets:
// chunks of two i64 (16 bytes), no alignment asked of a framework's view.
// CHECK-LABEL: func.func @copy_narrows_ids
// CHECK: ep.lane.copy_chunks {{.*}}{aligned = false, chunk = 2 : i64{{.*}}} : !ep.ptr<i64> -> !ep.ptr<i32>
func.func @copy_narrows_ids(%wide: !ep.ptr<i64>, %narrow: !ep.ptr<i32>) {
  %c0 = arith.constant 0 : index
  %c1024 = arith.constant 1024 : index
  ep.warp.copy_row %wide[%c0], %narrow[%c0], %c1024 : !ep.ptr<i64> -> !ep.ptr<i32>
  return
}

// Unaligned offsets keep the element-wise path.
// CHECK-LABEL: func.func @copy_unaligned
// CHECK: ep.lane.copy_chunks {{.*}}aligned = false
func.func @copy_unaligned(%x: !ep.ptr<bf16>, %y: !ep.ptr<bf16>, %at: index, %n: index) {
  ep.warp.copy_row %x[%at], %y[%at], %n : !ep.ptr<bf16> -> !ep.ptr<bf16>
  return
}

// A row to several rows: every destination's body runs first (its number a
// constant), then each lane loads copy_loads_in_flight chunks of the source
// once and stores them to every live destination.
// CHECK-LABEL: func.func @fanout_three
// CHECK-NOT: ep.warp.fanout_row
// CHECK-NOT: ep.destination
// GFX950: ep.lane.fanout_chunks {{.*}} stride %c512 live({{.*}}, {{.*}}, {{.*}}) rows({{.*}}, {{.*}}, {{.*}} : !ep.ptr<bf16>, !ep.ptr<bf16>, !ep.ptr<bf16>) {aligned = true, chunk = 8 : i64, unroll = 4 : i64} : !ep.ptr<bf16>
// SM90: ep.lane.fanout_chunks {{.*}} stride %c256 {{.*}} {aligned = true, chunk = 8 : i64, unroll = 8 : i64} : !ep.ptr<bf16>
// HOST: scf.for
// HOST: ep.lane.fanout_chunks {{.*}} {aligned = true, chunk = 8 : i64, unroll = 4 : i64}
func.func @fanout_three(%x: !ep.ptr<bf16>, %live: !ep.ptr<i32>, %out: !ep.ptr<bf16>, %t: index) {
  %c3 = arith.constant 3 : index
  %c7168 = arith.constant 7168 : index
  %zero = arith.constant 0 : i32
  %at = arith.muli %t, %c7168 : index
  ep.warp.fanout_row %x[%at], %c7168, destinations(%c3) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %flag = ep.load %live[%j] : !ep.ptr<i32>
    %valid = arith.cmpi ne, %flag, %zero : i32
    %offset = arith.muli %j, %c7168 : index
    %row = ep.ptr_add %out, %offset : !ep.ptr<bf16>
    ep.destination %valid, %row : !ep.ptr<bf16>
  }
  return
}

// A copy around a body: on GPUs each lane loads its first step of chunks
// (the target's copy_loads_in_flight) before the body, which runs once; the
// stores, and the row's later steps, follow it when the destination is live.
// The host runs the body, then a plain copy.
// CHECK-LABEL: func.func @copy_around
// CHECK-NOT: ep.warp.copy_row_around
// SIMT: %[[HELD:.*]] = ep.lane.hold_chunks {{.*}} {aligned = true, chunk = 8 : i64} : !ep.ptr<bf16> -> !ep.held_chunks<{{[48]}}>
// HOST-NOT: ep.lane.hold_chunks
// CHECK: ep.block_barrier
// CHECK: %[[SLOT:.*]] = arith.index_cast
// CHECK: scf.if
// SIMT: ep.lane.put_chunks %[[HELD]], {{.*}} {aligned = true, chunk = 8 : i64}
// SIMT: scf.for
// CHECK: ep.lane.copy_chunks {{.*}}aligned = true
// CHECK: return %[[SLOT]] : index
func.func @copy_around(%x: !ep.ptr<bf16>, %route: !ep.ptr<i32>, %out: !ep.ptr<bf16>, %t: index) -> index {
  %c7168 = arith.constant 7168 : index
  %zero = arith.constant 0 : i32
  %at = arith.muli %t, %c7168 : index
  %slot = ep.warp.copy_row_around %x[%at], %c7168 : !ep.ptr<bf16> -> index {
    ep.block_barrier
    %recorded = ep.load %route[%t] : !ep.ptr<i32>
    %fits = arith.cmpi sge, %recorded, %zero : i32
    %slot_index = arith.index_cast %recorded : i32 to index
    %offset = arith.muli %slot_index, %c7168 : index
    %row = ep.ptr_add %out, %offset : !ep.ptr<bf16>
    ep.copy_to %fits, %row : !ep.ptr<bf16> yield %slot_index : index
  }
  return %slot : index
}

// An aligned source held for a destination not known to be aligned: the
// stores go element by element, reading the source again.
// CHECK-LABEL: func.func @copy_around_unaligned_destination
// SIMT: ep.lane.hold_chunks {{.*}} {aligned = true, chunk = 8 : i64}
// SIMT: ep.lane.put_chunks {{.*}} {aligned = false, chunk = 8 : i64}
// CHECK: ep.lane.copy_chunks {{.*}}aligned = false
func.func @copy_around_unaligned_destination(%x: !ep.ptr<bf16>, %out: !ep.ptr<bf16>, %to: index) {
  %true = arith.constant true
  %c7168 = arith.constant 7168 : index
  ep.warp.copy_row_around %x[%c7168], %c7168 : !ep.ptr<bf16> {
    %row = ep.ptr_add %out, %to : !ep.ptr<bf16>
    ep.copy_to %true, %row : !ep.ptr<bf16>
  }
  return
}
