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

// expected-error @+1 {{'ep.kernel' must be a dictionary with an integer warps_per_block >= 1}}
func.func @kernel_without_geometry() attributes {ep.kernel = {}} { return }

// -----

// expected-error @+1 {{ep kernel argument #0 has type 'memref<4xf32>'}}
func.func @kernel_with_a_memref(%m: memref<4xf32>) attributes {ep.kernel = {warps_per_block = 2 : i64}} { return }

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
  // expected-error @+1 {{max_spins must be >= 1 (a wait is always bounded)}}
  %ok = ep.wait_until %p[%i] eq %v scope(system) max_spins(0) error(%p[%i], 1) : !ep.ptr<i32>, !ep.ptr<i32>
  return
}

// -----

func.func @bad_scope_keyword(%p: !ep.ptr<i32>, %i: index) {
  // expected-error @+1 {{'galaxy' is not a valid scope}}
  %v = ep.atomic_load %p[%i] scope(galaxy) order(acquire) : !ep.ptr<i32>
  return
}

// -----

ep.window_region @recv
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

func.func @codes_are_bytes(%x: !ep.ptr<bf16>, %q: !ep.ptr<i16>, %n: index) {
  // expected-error @+1 {{codes are bytes (!ep.ptr<i8>); got 'i16'}}
  ep.warp.quantize %x[%n], %q[%n], %n {format = #ep.fp8<target>} : !ep.ptr<bf16> -> !ep.ptr<i16>
  return
}

// -----

func.func @copy_converts_bf16_f32_only(%x: !ep.ptr<bf16>, %q: !ep.ptr<i8>, %n: index) {
  // expected-error @+1 {{copies between equal element types or between bf16 and f32; got 'bf16' -> 'i8'}}
  ep.warp.copy_row %x[%n], %q[%n], %n : !ep.ptr<bf16> -> !ep.ptr<i8>
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

// expected-error @+1 {{type parameter @row takes no default, multiple_of or min}}
ep.param @row : !ep.row_elem<"row"> {min = 1 : i64}
