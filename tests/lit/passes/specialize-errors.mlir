// Every bad binding is rejected with a message that names the parameter.
// RUN: not epjit-opt %s --ep-specialize 2>&1 | FileCheck %s --check-prefix=UNBOUND
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=7168,topk=8 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=wide 2>&1 | FileCheck %s --check-prefix=TYPE
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=7167 2>&1 | FileCheck %s --check-prefix=MULTIPLE
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=0 2>&1 | FileCheck %s --check-prefix=MIN
// RUN: not epjit-opt %s --ep-specialize=bind=hidden 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=64,warps_per_block=0 2>&1 | FileCheck %s --check-prefix=WARPS

// UNBOUND: error: parameter 'hidden' is not bound: pass hidden=VALUE (index)
// UNKNOWN: error: unknown parameter 'topk'; this template's parameters are: hidden
// TYPE: error: parameter 'hidden' takes an integer (index); got 'wide'
// MULTIPLE: error: parameter 'hidden' = 7167 must be a multiple of 2
// MIN: error: parameter 'hidden' = 0 is below its minimum 2
// FORM: error: binding 'hidden' is not KEY=VALUE
// WARPS: error: warps_per_block takes an integer in [1, 32]; got '0'
ep.param @hidden : index {min = 2 : i64, multiple_of = 2 : i64}

func.func @k(%out: !ep.ptr<i8>) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %hidden = ep.param_value @hidden : index
  return
}
