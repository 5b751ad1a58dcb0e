// ep-record-pointer-alignment: per kernel parameter, the bytes its address
// must be a multiple of. 16 where a 16-byte access relies on it: directly,
// through ptr_add and select, or through a helper's argument at every call;
// the element size for a pointer only read one element at a time (an
// offset the lowering cannot prove a multiple of a chunk); 0 for scalars and
// the window. The same on every target, since the lowering's proof is.
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse --ep-record-pointer-alignment | FileCheck %s
// RUN: epjit-opt %s --ep-check-target=target=gfx942 --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse --ep-record-pointer-alignment | FileCheck %s
// RUN: epjit-opt %s --ep-check-target=target=host --ep-lower-numerics --ep-lower-warp-ops --canonicalize --cse --ep-record-pointer-alignment | FileCheck %s

// A row copy at a multiple of 8 bf16 (16-byte chunks) from `rows`; `odd` is
// read at t * 3 (never a whole chunk), `flags` one word at a time.
// CHECK-LABEL: ep.kernel @direct
// CHECK-SAME: pointer_alignment = array<i64: 16, 16, 2, 4, 0>
ep.kernel @direct(%rows: !ep.ptr<bf16>, %out: !ep.ptr<bf16>, %odd: !ep.ptr<bf16>, %flags: !ep.ptr<i32>, %t: index)
    warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %c7168 = arith.constant 7168 : index
  %row = arith.muli %t, %c7168 : index
  ep.warp.copy_row %rows[%row], %out[%row], %c7168 : !ep.ptr<bf16> -> !ep.ptr<bf16>
  %at = arith.muli %t, %c3 : index
  ep.warp.copy_row %odd[%at], %out[%c0], %c3 : !ep.ptr<bf16> -> !ep.ptr<bf16>
  %flag = ep.load %flags[%t] : !ep.ptr<i32>
  ep.return
}

// A helper that copies with 16-byte accesses: what each call passes needs
// them, through a select of two parameters; a helper that copies element by
// element asks only the element size of what it is given.
func.func private @copy_row(%src: !ep.ptr<f32>, %dst: !ep.ptr<f32>) {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  ep.warp.copy_row %src[%c0], %dst[%c0], %c64 : !ep.ptr<f32> -> !ep.ptr<f32>
  return
}
func.func private @copy_odd(%src: !ep.ptr<f32>, %dst: !ep.ptr<f32>, %n: index) {
  ep.warp.copy_row %src[%n], %dst[%n], %n : !ep.ptr<f32> -> !ep.ptr<f32>
  return
}
// CHECK-LABEL: ep.kernel @through_helpers
// CHECK-SAME: pointer_alignment = array<i64: 16, 16, 16, 4, 4, 0, 0>
ep.kernel @through_helpers(%a: !ep.ptr<f32>, %b: !ep.ptr<f32>, %out: !ep.ptr<f32>, %c: !ep.ptr<f32>,
                           %d: !ep.ptr<f32>, %pick: index, %n: index) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %picked = arith.cmpi ne, %pick, %c0 : index
  %either = arith.select %picked, %a, %b : !ep.ptr<f32>
  func.call @copy_row(%either, %out) : (!ep.ptr<f32>, !ep.ptr<f32>) -> ()
  func.call @copy_odd(%c, %d, %n) : (!ep.ptr<f32>, !ep.ptr<f32>, index) -> ()
  ep.return
}
