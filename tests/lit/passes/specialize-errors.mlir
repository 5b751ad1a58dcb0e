// Every bad binding is rejected with a message that names the parameter.
// RUN: not epjit-opt %s --ep-specialize 2>&1 | FileCheck %s --check-prefix=UNBOUND
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=7168,topk=8 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=wide 2>&1 | FileCheck %s --check-prefix=TYPE
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=7167 2>&1 | FileCheck %s --check-prefix=MULTIPLE
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=0 2>&1 | FileCheck %s --check-prefix=MIN
// RUN: not epjit-opt %s --ep-specialize=bind=hidden 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=64,warps_per_block=0 2>&1 | FileCheck %s --check-prefix=WARPS
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=64,quant=fp8 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not epjit-opt %s --ep-specialize=bind=hidden=64,quant=3 2>&1 | FileCheck %s --check-prefix=NAMED-RANGE

// UNBOUND: error: parameter 'hidden' is not bound: pass hidden=VALUE (index)
// UNKNOWN: error: unknown parameter 'topk'; this template's parameters are: hidden, quant
// TYPE: error: parameter 'hidden' takes an integer (index); got 'wide'
// MULTIPLE: error: parameter 'hidden' = 7167 must be a multiple of 2
// MIN: error: parameter 'hidden' = 0 is below its minimum 2
// FORM: error: binding 'hidden' is not KEY=VALUE
// WARPS: error: warps_per_block takes an integer in [1, 32]; got '0'
// NAME: error: parameter 'quant' takes an integer (index) or one of its names (none, fp8_direct_cast, fp8_blockwise); got 'fp8'
// NAMED-RANGE: error: parameter 'quant' = 3 names nothing; it takes 0 to 2 or a name
ep.param @hidden : index {min = 2 : i64, multiple_of = 2 : i64}
ep.param @quant : index {default_value = 0 : index, names = ["none", "fp8_direct_cast", "fp8_blockwise"]}

ep.kernel @k(%out: !ep.ptr<i8>) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
}
