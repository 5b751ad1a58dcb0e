// Type parameters: one template serves bf16 and f32 rows; ep-specialize
// replaces !ep.row_elem<"row"> everywhere (signatures, pointers, ops) and
// records the binding; a missing or unsupported binding is an error.
// RUN: epjit-opt %s --ep-specialize=bind=row=f32 | FileCheck %s --check-prefix=F32
// RUN: epjit-opt %s --ep-specialize=bind=row=bf16 | FileCheck %s --check-prefix=BF16
// RUN: not epjit-opt %s --ep-specialize=bind=row=f16 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not epjit-opt %s --ep-specialize 2>&1 | FileCheck %s --check-prefix=UNBOUND

// F32: module attributes {ep.specialization = {row = f32}}
// BF16: module attributes {ep.specialization = {row = bf16}}
// BAD: error: type parameter 'row' takes bf16 or f32; got 'f16'
// UNBOUND: error: type parameter 'row' is not bound: pass row=bf16 or row=f32
ep.param @row : !ep.row_elem<"row">

// F32: ep.window_region @staged : f32
// BF16: ep.window_region @staged : bf16
ep.window_region @staged : !ep.row_elem<"row"> {
  %c8 = arith.constant 8 : index
  ep.yield %c8 : index
}

// F32-LABEL: ep.kernel @widen(%rows: !ep.ptr<f32>, %acc: !ep.ptr<f32>)
// F32: ep.warp.copy_row {{.*}} : !ep.ptr<f32> -> !ep.ptr<f32>
// F32-NOT: row_elem
// BF16-LABEL: ep.kernel @widen(%rows: !ep.ptr<bf16>, %acc: !ep.ptr<f32>)
// BF16: ep.warp.copy_row {{.*}} : !ep.ptr<bf16> -> !ep.ptr<f32>
// BF16-NOT: row_elem
ep.kernel @widen(%rows: !ep.ptr<!ep.row_elem<"row">>, %acc: !ep.ptr<f32>) warps_per_block(1) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %at = ep.ptr_add %rows, %c8 : !ep.ptr<!ep.row_elem<"row">>
  ep.warp.copy_row %at[%c0], %acc[%c0], %c8 : !ep.ptr<!ep.row_elem<"row">> -> !ep.ptr<f32>
}
