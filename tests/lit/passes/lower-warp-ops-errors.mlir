// ep-lower-warp-ops refuses a sum whose source count is not a constant (the
// lowering keeps every source's chunk in registers, so it must know how
// many), and flagged rows it cannot prove start on a 16-byte line.
// RUN: epjit-opt %s --split-input-file --ep-check-target=target=sm90 --ep-lower-numerics --ep-lower-warp-ops -verify-diagnostics

func.func @sources_unknown(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{ep.warp.sum_rows needs a constant count of 1 to 64 sources once specialized}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %x : !ep.ptr<bf16>
  }
  return
}

// -----

func.func @flagged_row_off_a_line(%x: !ep.ptr<bf16>, %lines: !ep.ptr<bf16>, %n: index, %flag: i32) {
  %c3 = arith.constant 3 : index
  // expected-error @+1 {{a flagged row must start on a 16-byte boundary the compiler can prove}}
  ep.warp.copy_row %x[%n], %lines[%c3], %n flagged(%flag) : !ep.ptr<bf16> -> !ep.ptr<bf16>
  return
}

// -----

func.func @flagged_source_off_a_line(%x: !ep.ptr<bf16>, %lines: !ep.ptr<bf16>, %e: !ep.ptr<i32>, %n: index,
                                     %flag: i32) {
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %true = arith.constant true
  // expected-error @+1 {{a flagged source must start on a 16-byte boundary the compiler can prove}}
  ep.warp.sum_rows %x[%n], %n, sources(%c1) flagged(%flag) error(%e[%n], %flag : !ep.ptr<i32>) timeout_ms(%flag) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    %row = ep.ptr_add %lines, %c12 : !ep.ptr<bf16>
    ep.source %true, %row : !ep.ptr<bf16>
  }
  return
}
