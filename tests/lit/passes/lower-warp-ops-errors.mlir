// ep-lower-warp-ops refuses a sum whose source count is not a constant: the
// lowering keeps every source's chunk in registers, so it must know how many.
// RUN: epjit-opt %s --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops -verify-diagnostics

func.func @sources_unknown(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{ep.warp.sum_rows needs a constant count of 1 to 64 sources once specialized}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %x : !ep.ptr<bf16>
  }
  return
}
