// ep-link: a template's includes become one module: parts are linked once
// however often they are included (here common twice, directly and through
// helpers), nested includes follow, and what the parts declare comes before
// what uses it. An include that names nothing, or a symbol two files define,
// is an error naming them.
// RUN: epjit-opt %s --mlir-very-unsafe-disable-verifier-on-parsing --ep-link=search-dir=%S/Inputs/link | FileCheck %s
// RUN: not epjit-opt %s --mlir-very-unsafe-disable-verifier-on-parsing --ep-link 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: sed 's|"helpers"|"clash"|' %s | not epjit-opt --mlir-very-unsafe-disable-verifier-on-parsing --ep-link=search-dir=%S/Inputs/link 2>&1 | FileCheck %s --check-prefix=CLASH

// CHECK-NOT: ep.include
// CHECK: ep.param @hidden
// CHECK-NOT: ep.param @hidden
// CHECK: ep.constant @state_error
// CHECK: func.func private @twice
// CHECK: ep.kernel @uses_both
// CHECK-NOT: ep.include
// MISSING: error: ep.include "common" names no template (looked in the built-in templates: {{.*}}ep/common{{.*}})
// CLASH: clash.mlir:1:1: error: @hidden is defined in both common.mlir and clash.mlir
ep.include "common"
ep.include "helpers"

ep.kernel @uses_both(%out: !ep.ptr<i32>) warps_per_block(1) {
  %hidden = ep.param_value @hidden : index
  %error = ep.constant_value @state_error : index
  %at = func.call @twice(%hidden) : (index) -> index
  %value = arith.index_cast %error : index to i32
  ep.store %value, %out[%at] : !ep.ptr<i32>
}
