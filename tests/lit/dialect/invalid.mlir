// RUN: epjit-opt %s -split-input-file -verify-diagnostics

func.func @custom_form_rejects_a_non_index_type() -> i32 {
  // expected-error @+1 {{expected builtin.index, but found 'i32'}}
  %warp = ep.warp_index : i32
  return %warp : i32
}

// -----

func.func @verifier_rejects_a_non_index_result() -> i32 {
  // expected-error @+1 {{result #0 must be index}}
  %warp = "ep.warp_index"() : () -> i32
  return %warp : i32
}
