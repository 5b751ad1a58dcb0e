// ep-specialize binds parameters (bound, defaulted, named), replaces named
// constants, folds (window region counts become constants), records the
// bindings and the constants, and the result is the same whatever the target.
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,mode=scatter,warps_per_block=8 --ep-check-target=target=gfx942 | FileCheck %s --check-prefixes=CHECK,GFX942
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,mode=scatter,warps_per_block=8 --ep-check-target=target=gfx950 | FileCheck %s --check-prefixes=CHECK,GFX950
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,mode=scatter,warps_per_block=8 --ep-check-target=target=gfx1250 | FileCheck %s --check-prefixes=CHECK,GFX1250
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,mode=scatter,warps_per_block=8 --ep-check-target=target=sm90 | FileCheck %s --check-prefixes=CHECK,SM90
// RUN: epjit-opt %s --ep-specialize=bind=hidden=7168,mode=scatter,warps_per_block=8 --ep-check-target=target=host | FileCheck %s --check-prefixes=CHECK,HOST

// CHECK: module attributes {ep.constants = {state_error = 3 : index}, ep.specialization = {experts = 8 : i32, hidden = 7168 : index, mode = 1 : index}
// GFX942-SAME: ep.target = "gfx942"
// GFX950-SAME: ep.target = "gfx950"
// GFX1250-SAME: ep.target = "gfx1250"
// SM90-SAME: ep.target = "sm90"
// HOST-SAME: ep.target = "host"
// CHECK-NOT: ep.param
// CHECK-NOT: ep.constant
ep.param @hidden : index {min = 1 : i64}
ep.param @experts : i32 {default_value = 8 : i32}
ep.param @mode : index {names = ["gather", "scatter"]}
ep.constant @state_error = 3 : index

// Scatter (mode 1): 7168 / 2 rows of four words; gather would have none.
// CHECK: ep.window_region @words : i32 {
// CHECK-NEXT: %[[COUNT:.*]] = arith.constant 14336 : index
// CHECK-NEXT: ep.yield %[[COUNT]] : index
ep.window_region @words : i32 {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c2 = arith.constant 2 : index
  %hidden = ep.param_value @hidden : index
  %mode = ep.param_value @mode : index
  %scatter = arith.cmpi ne, %mode, %c0 : index
  %half = arith.divui %hidden, %c2 : index
  %words = arith.muli %half, %c4 : index
  %count = arith.select %scatter, %words, %c0 : index
  ep.yield %count : index
}

// CHECK-LABEL: ep.kernel @rows(%out: !ep.ptr<i32>) warps_per_block(8)
ep.kernel @rows(%out: !ep.ptr<i32>) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
  %experts = ep.param_value @experts : i32
  %error = ep.constant_value @state_error : index
  %c2 = arith.constant 2 : index
  // Folded: 7168 / 2 + 3.
  // CHECK-DAG: %[[AT:.*]] = arith.constant 3587 : index
  // CHECK-DAG: %[[EXPERTS:.*]] = arith.constant 8 : i32
  %half = arith.divui %hidden, %c2 : index
  %at = arith.addi %half, %error : index
  // CHECK: ep.store %[[EXPERTS]], %{{.*}}[%[[AT]]]
  ep.store %experts, %out[%at] : !ep.ptr<i32>
}
