// ep-specialize lays out the ep.buffer_part declarations of each buffer in
// order (each part at the next multiple of its alignment) and folds every
// ep.buffer_offset to its part's offset in elements; the parts stay for the
// interface record, and each kept kernel records its when(...) as written.
// RUN: epjit-opt %s --ep-specialize=bind=tokens=5,topk=3,std=true | FileCheck %s
ep.param @tokens : index {min = 1 : i64}
ep.param @topk : index {min = 1 : i64}
ep.param @std : i1 {default_value = false}

// 15 entries (60 bytes), one count word at 60, then 4 i64 words on the next
// 16-byte line (64): element offsets 0, 15 and 8.
// CHECK: ep.buffer_part @entries in "map" : i32 {
// CHECK-NEXT: arith.constant 15 : index
ep.buffer_part @entries in "map" : i32 {
  %tokens = ep.param_value @tokens : index
  %topk = ep.param_value @topk : index
  %count = arith.muli %tokens, %topk : index
  ep.yield %count : index
}
ep.buffer_part @received in "map" : i32 attributes {meaning = "one word"} {
  %c1 = arith.constant 1 : index
  ep.yield %c1 : index
}
ep.buffer_part @wide in "map" : i64 attributes {align = 16 : i64} {
  %c4 = arith.constant 4 : index
  ep.yield %c4 : index
}
// Another buffer starts at 0 again.
ep.buffer_part @other in "second" : f32 {
  %c2 = arith.constant 2 : index
  ep.yield %c2 : index
}

// CHECK-LABEL: ep.kernel @write
// CHECK-SAME: ep.when = "@std"
// CHECK-DAG: %[[RECEIVED:.*]] = arith.constant 15 : index
// CHECK-DAG: %[[WIDE:.*]] = arith.constant 8 : index
// CHECK-DAG: %[[OTHER:.*]] = arith.constant 0 : index
// CHECK-NOT: ep.buffer_offset
// CHECK: ep.store %{{.*}}, %{{.*}}[%[[RECEIVED]]] : !ep.ptr<i32>
// CHECK: ep.store %{{.*}}, %{{.*}}[%[[WIDE]]] : !ep.ptr<i64>
// CHECK: ep.store %{{.*}}, %{{.*}}[%[[OTHER]]] : !ep.ptr<f32>
ep.kernel @write(%map: !ep.ptr<i32>, %wide: !ep.ptr<i64>, %second: !ep.ptr<f32>) warps_per_block(1) when(@std) {
  %one = arith.constant 1 : i32
  %two = arith.constant 2 : i64
  %half = arith.constant 0.5 : f32
  %at = ep.buffer_offset @received : index
  ep.store %one, %map[%at] : !ep.ptr<i32>
  %wide_at = ep.buffer_offset @wide : index
  ep.store %two, %wide[%wide_at] : !ep.ptr<i64>
  %other_at = ep.buffer_offset @other : index
  ep.store %half, %second[%other_at] : !ep.ptr<f32>
}
