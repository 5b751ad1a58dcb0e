// ep-specialize leaves a `runtime` parameter that no binding names to run
// time: a kernel reads it from its window table (ep.runtime_param, indexed
// by its place in the module's ep.runtime_params), a helper that reads it
// takes it as a trailing argument its callers pass, and a region's or part's
// count linear in it keeps its value at zero and states the coefficient
// (ep.count_per). Bound, the same parameter is a constant like any other.
// RUN: epjit-opt %s --ep-specialize=bind=words=6 | FileCheck %s
// RUN: epjit-opt %s --ep-specialize=bind=words=6,rows=5,slots=40 | FileCheck %s --check-prefix=BOUND
ep.param @words : index {min = 1 : i64}
ep.param @rows : index {min = 1 : i64, runtime}
ep.param @slots : index {min = 1 : i64, runtime}

// CHECK: module attributes {ep.runtime_params = ["rows", "slots"]
// BOUND-NOT: ep.runtime_params

// slots * words + 16: 16 at zero, 6 per slot.
// CHECK: ep.window_region @inbox : i32 attributes {ep.count_per = {slots = 6 : i64}} {
// CHECK-NEXT: %[[AT_ZERO:.*]] = arith.constant 16 : index
// CHECK-NEXT: ep.yield %[[AT_ZERO]]
// BOUND: ep.window_region @inbox : i32 {
// BOUND-NEXT: arith.constant 256 : index
ep.window_region @inbox : i32 {
  %c16 = arith.constant 16 : index
  %slots = ep.param_value @slots : index
  %words = ep.param_value @words : index
  %cells = arith.muli %slots, %words : index
  %count = arith.addi %cells, %c16 : index
  ep.yield %count : index
}

// A part sized by rows, then one a kernel addresses: its offset is the
// same linear form the runtime places it at (3 words per row), computed in
// the kernel from the window table.
// CHECK: ep.buffer_part @entries in "map" : i32 attributes {ep.count_per = {rows = 3 : i64}} {
// CHECK-NEXT: %[[NONE:.*]] = arith.constant 0 : index
// CHECK: ep.buffer_part @received in "map" : i32 {
ep.buffer_part @entries in "map" : i32 {
  %c3 = arith.constant 3 : index
  %rows = ep.param_value @rows : index
  %count = arith.muli %rows, %c3 : index
  ep.yield %count : index
}
ep.buffer_part @received in "map" : i32 {
  %c1 = arith.constant 1 : index
  ep.yield %c1 : index
}

// CHECK: func.func private @slot_of(%{{.*}}: index, %[[ROWS:.*]]: index, %[[SLOTS:.*]]: index) -> index
// CHECK: arith.remui %{{.*}}, %[[SLOTS]] : index
// BOUND-LABEL: func.func private @slot_of(%{{.*}}: index) -> index
// BOUND: arith.remui %{{.*}}, %{{.*}} : index
func.func private @slot_of(%entry: index) -> index {
  %slots = ep.param_value @slots : index
  %slot = arith.remui %entry, %slots : index
  return %slot : index
}

// CHECK: func.func private @through(%{{.*}}: index, %[[R:.*]]: index, %[[S:.*]]: index) -> index
// CHECK: call @slot_of(%{{.*}}, %[[R]], %[[S]])
func.func private @through(%entry: index) -> index {
  %slot = func.call @slot_of(%entry) : (index) -> index
  return %slot : index
}

// CHECK-LABEL: ep.kernel @store
// CHECK-DAG: %[[KROWS:.*]] = ep.runtime_param %{{.*}}[0] : index
// CHECK-DAG: %[[KSLOTS:.*]] = ep.runtime_param %{{.*}}[1] : index
// CHECK-DAG: %[[THREE:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[RECEIVED_AT:.*]] = arith.muli %[[KROWS]], %[[THREE]] : index
// CHECK: call @through(%{{.*}}, %[[KROWS]], %[[KSLOTS]])
// CHECK: arith.cmpi ult, %{{.*}}, %[[KROWS]] : index
// CHECK: ep.store %{{.*}}, %{{.*}}[%[[RECEIVED_AT]]]
// BOUND-LABEL: ep.kernel @store
// BOUND-NOT: ep.runtime_param
// BOUND-DAG: %[[FIFTEEN:.*]] = arith.constant 15 : index
// BOUND: call @through(%{{.*}}) : (index) -> index
// BOUND: ep.store %{{.*}}, %{{.*}}[%[[FIFTEEN]]]
ep.kernel @store(%map: !ep.ptr<i32>, %token: index, %w: !ep.window) warps_per_block(1) {
  %at = ep.buffer_offset @received : index
  %slot = func.call @through(%token) : (index) -> index
  %rows = ep.param_value @rows : index
  %inside = arith.cmpi ult, %token, %rows : index
  scf.if %inside {
    %value = arith.index_cast %slot : index to i32
    ep.store %value, %map[%at] : !ep.ptr<i32>
  }
}
