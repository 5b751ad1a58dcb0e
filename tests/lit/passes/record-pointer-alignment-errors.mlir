// ep-record-pointer-alignment refuses a 16-byte access whose pointer it
// cannot follow to a kernel parameter (here a loop-carried pointer, which
// ep-lower-warp-ops takes for an aligned row start like any block
// argument): the interface record would otherwise claim less than the code
// assumes.
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops --ep-record-pointer-alignment -verify-diagnostics

ep.kernel @loop_carried(%rows: !ep.ptr<f32>, %out: !ep.ptr<f32>, %n: index) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %last = scf.for %i = %c0 to %n step %c1 iter_args(%row = %rows) -> (!ep.ptr<f32>) {
    // expected-error @+1 {{a 16-byte access's pointer is a block argument of scf.for, which ep-record-pointer-alignment cannot follow to a kernel parameter}}
    ep.warp.copy_row %row[%c0], %out[%c0], %c64 : !ep.ptr<f32> -> !ep.ptr<f32>
    scf.yield %row : !ep.ptr<f32>
  }
  ep.return
}
