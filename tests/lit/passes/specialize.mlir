// ep-specialize binds parameters (bound, defaulted), folds, records the
// bindings, and the result is the same whatever the target.
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,warps_per_block=8 --ep-check-target=target=gfx942 | FileCheck %s --check-prefixes=CHECK,GFX942
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,warps_per_block=8 --ep-check-target=target=gfx950 | FileCheck %s --check-prefixes=CHECK,GFX950
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,warps_per_block=8 --ep-check-target=target=gfx1250 | FileCheck %s --check-prefixes=CHECK,GFX1250
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,warps_per_block=8 --ep-check-target=target=sm90 | FileCheck %s --check-prefixes=CHECK,SM90
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,warps_per_block=8 --ep-check-target=target=host | FileCheck %s --check-prefixes=CHECK,HOST

// CHECK: module attributes {ep.specialization = {experts = 8 : i32, hidden = 7168 : index}
// GFX942-SAME: ep.target = "gfx942"
// GFX950-SAME: ep.target = "gfx950"
// GFX1250-SAME: ep.target = "gfx1250"
// SM90-SAME: ep.target = "sm90"
// HOST-SAME: ep.target = "host"
// CHECK-NOT: ep.param
ep.param @hidden : index {min = 1 : i64}
ep.param @experts : i32 {default_value = 8 : i32}

// CHECK-LABEL: func.func @rows
// CHECK-SAME: ep.kernel = {warps_per_block = 8 : i64}
func.func @rows(%out: !ep.ptr<i32>) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %hidden = ep.param_value @hidden : index
  %experts = ep.param_value @experts : i32
  %c2 = arith.constant 2 : index
  // Folded: 7168 / 2.
  // CHECK-DAG: %[[HALF:.*]] = arith.constant 3584 : index
  // CHECK-DAG: %[[EXPERTS:.*]] = arith.constant 8 : i32
  %half = arith.divui %hidden, %c2 : index
  // CHECK: ep.store %[[EXPERTS]], %{{.*}}[%[[HALF]]]
  ep.store %experts, %out[%half] : !ep.ptr<i32>
  return
}
