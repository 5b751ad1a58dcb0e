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

// -----

// expected-error @+1 {{!ep.ptr element type must be i8, i16, i32, i64, bf16, f16 or f32, got 'f64'}}
func.func @bad_pointee(%p: !ep.ptr<f64>) { return }

// -----

// expected-error @+1 {{parameters are index, i32, i64, i1, or !ep.row_elem}}
ep.param @scale : f32

// -----

ep.param @hidden : index
func.func @param_type_mismatch() {
  // expected-error @+1 {{@hidden is declared 'index' but read as 'i32'}}
  %h = ep.param_value @hidden : i32
  return
}

// -----

func.func @undeclared_param() {
  // expected-error @+1 {{@tokens is not a declared ep.param}}
  %h = ep.param_value @tokens : index
  return
}

// -----

// expected-error @+1 {{warps_per_block must be >= 1}}
ep.kernel @kernel_without_warps() warps_per_block(0) {}

// -----

// expected-error @+1 {{parameter 'm' has type 'memref<4xf32>'; kernel parameters are !ep.ptr, !ep.window, index, i32, i64 or f32}}
ep.kernel @kernel_with_a_memref(%m: memref<4xf32>) warps_per_block(2) {}

// -----

// expected-error @+1 {{two parameters are named 'n'}}
"ep.kernel"() ({
^bb0(%a: index, %b: index):
  ep.return
}) {sym_name = "twice", function_type = (index, index) -> (), arg_names = ["n", "n"], warps_per_block = 1 : i64} : () -> ()

// -----

// expected-error @+1 {{when predicate 'near' is not one of eq, ne, lt, le, gt, ge}}
"ep.kernel"() ({
^bb0:
  ep.return
}) {sym_name = "odd_when", function_type = () -> (), arg_names = [], warps_per_block = 1 : i64,
    when_params = [@world], when_predicates = ["near"], when_operands = [2]} : () -> ()

// -----

// expected-error @+1 {{when compares with a parameter (@name), an integer or a name ("..."); got 2.500000e+00 : f32}}
ep.kernel @when_a_float() warps_per_block(1) when(@world lt 2.5 : f32) {}

// -----

// expected-error @+1 {{when(...) needs both a predicate and an operand, or neither}}
"ep.kernel"() ({
^bb0:
  ep.return
}) {sym_name = "half_when", function_type = () -> (), arg_names = [], warps_per_block = 1 : i64,
    when_params = [@world], when_predicates = ["eq"], when_operands = [unit]} : () -> ()

// -----

// expected-error @+1 {{when(...) needs a predicate and an operand entry for each of its 2 parameters}}
"ep.kernel"() ({
^bb0:
  ep.return
}) {sym_name = "short_when", function_type = () -> (), arg_names = [], warps_per_block = 1 : i64,
    when_params = [@world, @nodes], when_predicates = ["eq"], when_operands = [2]} : () -> ()

// -----

// expected-error @+1 {{expected attribute value}}
ep.kernel @dangling_and() warps_per_block(1) when(@world eq 2 and) {}

// -----

// expected-error @+1 {{has 2 parameters but 1 names}}
"ep.kernel"() ({
^bb0(%a: index, %b: index):
  ep.return
}) {sym_name = "unnamed", function_type = (index, index) -> (), arg_names = ["n"], warps_per_block = 1 : i64} : () -> ()

// -----

// expected-error @+1 {{region @r's body must end with ep.yield of its element count}}
"ep.window_region"() ({
^bb0:
}) {sym_name = "r", element = i32} : () -> ()

// -----

// expected-error @+1 {{region @r holds 'f64'; a region's elements are what an !ep.ptr may point to}}
ep.window_region @r : f64 {
  %c = arith.constant 1 : index
  ep.yield %c : index
}

// -----

// expected-error @+1 {{constant @half has type 'f32'; constants are index, i32 or i64}}
ep.constant @half = 0.5 : f32

// -----

ep.constant @word = 3 : index
func.func @constant_type_mismatch() {
  // expected-error @+1 {{@word is declared 'index' but read as 'i32'}}
  %w = ep.constant_value @word : i32
  return
}

// -----

func.func @undeclared_constant() {
  // expected-error @+1 {{@nothing is not a declared ep.constant}}
  %w = ep.constant_value @nothing : index
  return
}

// -----

// expected-error @+1 {{the name 'none' appears twice}}
ep.param @quant : index {names = ["none", "none"]}

// -----

// expected-error @+1 {{names go with an integer parameter}}
ep.param @flag : i1 {names = ["off", "on"]}

// -----

func.func @release_load(%p: !ep.ptr<i32>, %i: index) {
  // expected-error @+1 {{a load cannot have release order; use relaxed or acquire}}
  %v = ep.atomic_load %p[%i] scope(system) order(release) : !ep.ptr<i32>
  return
}

// -----

func.func @acquire_store(%p: !ep.ptr<i32>, %i: index, %v: i32) {
  // expected-error @+1 {{a store cannot have acquire order; use relaxed or release}}
  ep.atomic_store %v, %p[%i] scope(system) order(acquire) : !ep.ptr<i32>
  return
}

// -----

func.func @relaxed_fence() {
  // expected-error @+1 {{a relaxed fence orders nothing}}
  ep.fence scope(system) order(relaxed)
  return
}

// -----

func.func @unbounded_wait(%p: !ep.ptr<i32>, %i: index, %v: i32) {
  %code = arith.constant 1 : i32
  %never = arith.constant 0 : i32
  // expected-error @+1 {{timeout_ms must be >= 1 (a wait is always bounded in time); got 0}}
  %ok = ep.wait_until %p[%i] eq %v scope(system) timeout_ms(%never) error(%p[%i], %code) : !ep.ptr<i32>, !ep.ptr<i32>
  return
}

// -----

func.func @error_code_zero(%p: !ep.ptr<i32>, %i: index, %v: i32) {
  %code = arith.constant 0 : i32
  // expected-error @+1 {{error code 0 means no error; use a nonzero code}}
  %ok = ep.wait_until %p[%i] eq %v scope(system) timeout_ms(%v) error(%p[%i], %code) : !ep.ptr<i32>, !ep.ptr<i32>
  return
}

// -----

func.func @bad_scope_keyword(%p: !ep.ptr<i32>, %i: index) {
  // expected-error @+1 {{'galaxy' is not a valid scope}}
  %v = ep.atomic_load %p[%i] scope(galaxy) order(acquire) : !ep.ptr<i32>
  return
}

// -----

ep.window_region @recv : i32 {
  %c = arith.constant 1 : index
  ep.yield %c : index
}
func.func @unknown_region(%w: !ep.window, %i: index) {
  // expected-error @+1 {{@send is not a declared ep.window_region}}
  %p = ep.peer_ptr %w[%i] @send[%i] : !ep.ptr<bf16>
  return
}

// -----

func.func @fp4_needs_mx(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  // expected-error @+1 {{fp4 is MX-scaled: it needs block = 32 and scale = #ep.scale<e8m0>}}
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp4<e2m1>} : !ep.ptr<bf16> -> !ep.ptr<i8>
  return
}

// -----

func.func @blockwise_is_128(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{f32 blockwise scales cover blocks of 128 elements; got block = 64}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<target>, block = 64, scale = #ep.scale<f32>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @scales_need_a_block(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{a direct cast takes no scales operand}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @mx_scales_are_bytes(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{scales of kind e8m0 are stored as '!ep.ptr<i8>'; got '!ep.ptr<f32>'}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @deepep_is_e4m3fn_blocks_of_128(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{#ep.scale<deepep> is DeepEP's cast: block = 128 and format = #ep.fp8<e4m3fn> (its 448)}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<e5m2>, block = 128, scale = #ep.scale<deepep>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @deepep_quantizes_only(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{#ep.scale<deepep_pow2> is a quantize rule; dequantize its codes with #ep.scale<f32>}}
  ep.warp.dequantize %q[%n], %x[%n], %n scales %s[%n] {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_pow2>} : !ep.ptr<i8> -> !ep.ptr<bf16>, !ep.ptr<f32>
  return
}

// -----

func.func @deepep_ue8m0_scales_are_bytes(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{scales of kind deepep_ue8m0 are stored as '!ep.ptr<i8>'; got '!ep.ptr<f32>'}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_ue8m0>} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @scales_group_needs_a_stride(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  // expected-error @+1 {{scales_group needs a scales_stride (the distance between groups)}}
  ep.warp.quantize %x[%n], %q[%n], %n scales %s[%n] {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>, scales_group = 4} : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  return
}

// -----

func.func @deepep_scale_kinds(%a: f32) {
  // expected-error @+1 {{the stored scale of deepep_ue8m0 is i8}}
  %s, %f = ep.deepep_scale %a {scale = #ep.scale<deepep_ue8m0>} : f32
  return
}

// -----

func.func @codes_are_bytes(%x: !ep.ptr<bf16>, %q: !ep.ptr<i16>, %n: index) {
  // expected-error @+1 {{codes are bytes (!ep.ptr<i8>); got 'i16'}}
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i16>
  return
}

// -----

func.func @copy_converts_bf16_f32_only(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  // expected-error @+1 {{copies between equal element types, between bf16 and f32, or i64 to i32; got 'bf16' -> 'i8'}}
  ep.warp.copy_row %x[%n], %q[%n], %n : !ep.ptr<bf16> -> !ep.ptr<i8>
  return
}

// -----

// Ids narrow (i64 -> i32); they never widen through a copy.
func.func @copy_never_widens_ids(%narrow: !ep.ptr<i32>, %wide: !ep.ptr<i64>, %n: index) {
  // expected-error @+1 {{copies between equal element types, between bf16 and f32, or i64 to i32; got 'i32' -> 'i64'}}
  ep.warp.copy_row %narrow[%n], %wide[%n], %n : !ep.ptr<i32> -> !ep.ptr<i64>
  return
}

// -----

func.func @accumulate_into_f32(%x: !ep.ptr<bf16>, %n: index) {
  // expected-error @+1 {{accumulates into f32; got '!ep.ptr<bf16>'}}
  ep.warp.accumulate %x[%n], %x[%n], %n : !ep.ptr<bf16> -> !ep.ptr<bf16>
  return
}

// -----

// expected-error @+1 {{type parameter @row must be declared as !ep.row_elem<"row">}}
ep.param @row : !ep.row_elem<"other">

// -----

// expected-error @+1 {{type parameter @row takes no default, multiple_of, min or at_most}}
ep.param @row : !ep.row_elem<"row"> {min = 1 : i64}

// -----

// expected-error @+1 {{at_most names a target fact: "wave_size", not "lanes"}}
ep.param @ranks : index {at_most = "lanes"}

// -----

// expected-error @+1 {{at_most bounds an integer parameter; @flag is i1}}
ep.param @flag : i1 {at_most = "wave_size"}

// -----

func.func @sum_into_codes(%q: !ep.ptr<i8>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{sums into bf16 or f32 rows; got 'i8'}}
  ep.warp.sum_rows %q[%n], %n, sources(%n) : !ep.ptr<i8> {
  ^bb0(%j: index):
    ep.source %true, %q : !ep.ptr<i8>
  }
  return
}

// -----

func.func @sum_codes_without_format(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{sources are bf16 or f32 rows (or fp8 codes with a format); got 'i8'}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %q : !ep.ptr<i8>
  }
  return
}

// -----

func.func @sum_blockwise_without_scales(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{scaled sources give their scales: ep.source ... scales %s}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %q : !ep.ptr<i8>
  }
  return
}

// -----

func.func @sum_mx_blocks(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{scaled sources are fp8 blockwise: block = 128 and scale = #ep.scale<f32>}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) {format = #ep.fp8<target>, block = 32, scale = #ep.scale<f32>} : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %q scales %s : !ep.ptr<i8>, !ep.ptr<f32>
  }
  return
}

// -----

func.func @flagged_copy_converts(%x: !ep.ptr<bf16>, %f: !ep.ptr<f32>, %n: index, %flag: i32) {
  // expected-error @+1 {{a flagged copy moves bf16 or f32 rows unconverted (16-byte chunks, two lines each); got 'bf16' -> 'f32'}}
  ep.warp.copy_row %x[%n], %f[%n], %n flagged(%flag) : !ep.ptr<bf16> -> !ep.ptr<f32>
  return
}

// -----

func.func @flagged_sum_of_codes(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %s: !ep.ptr<f32>, %e: !ep.ptr<i32>, %n: index,
                                %flag: i32) {
  %true = arith.constant true
  // expected-error @+1 {{flagged sources are bf16 or f32 rows, not fp8 codes}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) flagged(%flag) error(%e[%n], %flag : !ep.ptr<i32>) timeout_ms(%flag)
      {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %q scales %s : !ep.ptr<i8>, !ep.ptr<f32>
  }
  return
}

// -----

func.func @flagged_sum_error_word(%x: !ep.ptr<bf16>, %e: !ep.ptr<i8>, %n: index, %flag: i32) {
  %true = arith.constant true
  // expected-error @+1 {{the error word of a flagged sum is i32; got '!ep.ptr<i8>'}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) flagged(%flag) error(%e[%n], %flag : !ep.ptr<i8>) timeout_ms(%flag) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %x : !ep.ptr<bf16>
  }
  return
}

// -----

func.func @unflagged_source_in_a_plain_sum(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{ep.source ... unflagged(...) names plain rows among flagged ones: the sum must be flagged}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.source %true, %x unflagged(%true) : !ep.ptr<bf16>
  }
  return
}

// -----

func.func @flagged_sum_without_its_wait(%x: !ep.ptr<bf16>, %n: index, %flag: i32) {
  %true = arith.constant true
  // expected-error @+1 {{flagged sources need all of flag, error word, error index, code and timeout_ms}}
  "ep.warp.sum_rows"(%x, %n, %n, %n, %flag) ({
  ^bb0(%j: index):
    ep.source %true, %x : !ep.ptr<bf16>
  }) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0>} : (!ep.ptr<bf16>, index, index, index, i32) -> ()
  return
}

// -----

func.func @sum_body_without_index(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{the body takes one index argument: the source's number}}
  ep.warp.sum_rows %x[%n], %n, sources(%n) : !ep.ptr<bf16> {
  ^bb0(%j: i32):
    ep.source %true, %x : !ep.ptr<bf16>
  }
  return
}

// -----

func.func @fanout_to_another_type(%x: !ep.ptr<bf16>, %f: !ep.ptr<f32>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{destinations hold the source's element type ('bf16'); got 'f32'}}
  ep.warp.fanout_row %x[%n], %n, destinations(%n) : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.destination %true, %f : !ep.ptr<f32>
  }
  return
}

// -----

func.func @fanout_body_without_a_number(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{the body takes one index argument: the destination's number}}
  ep.warp.fanout_row %x[%n], %n, destinations(%n) : !ep.ptr<bf16> {
  ^bb0(%j: i32):
    ep.destination %true, %x : !ep.ptr<bf16>
  }
  return
}

// -----

func.func @copy_around_to_another_type(%x: !ep.ptr<bf16>, %f: !ep.ptr<f32>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{the destination holds the source's element type ('bf16'); got 'f32'}}
  ep.warp.copy_row_around %x[%n], %n : !ep.ptr<bf16> {
    ep.copy_to %true, %f : !ep.ptr<f32>
  }
  return
}

// -----

func.func @copy_around_yields_other_types(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{ep.copy_to yields the op's result types (1 values); it yields 2}}
  %r = ep.warp.copy_row_around %x[%n], %n : !ep.ptr<bf16> -> index {
    ep.copy_to %true, %x : !ep.ptr<bf16> yield %n, %n : index, index
  }
  return
}

// -----

func.func @copy_around_body_with_an_argument(%x: !ep.ptr<bf16>, %n: index) {
  %true = arith.constant true
  // expected-error @+1 {{the body takes no arguments}}
  ep.warp.copy_row_around %x[%n], %n : !ep.ptr<bf16> {
  ^bb0(%j: index):
    ep.copy_to %true, %x : !ep.ptr<bf16>
  }
  return
}
