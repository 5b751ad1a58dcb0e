// What ep-specialize refuses of runtime parameters left unbound.
// RUN: epjit-opt %s -split-input-file -verify-diagnostics --ep-specialize

// expected-error @+1 {{runtime parameter @limit must be an index with no default_value, names or at_most}}
ep.param @limit : index {runtime, default_value = 4 : index}

// -----

ep.param @rows : index {runtime}
// expected-error @+1 {{the count of window region @square is not linear in the runtime parameters}}
ep.window_region @square : i32 {
  %rows = ep.param_value @rows : index
  %count = arith.muli %rows, %rows : index
  ep.yield %count : index
}

// -----

ep.param @rows : index {runtime}
ep.buffer_part @entries in "map" : i32 {
  %rows = ep.param_value @rows : index
  ep.yield %rows : index
}
ep.buffer_part @total in "map" : i32 attributes {align = 16 : i64} {
  %c1 = arith.constant 1 : index
  ep.yield %c1 : index
}
ep.kernel @read(%map: !ep.ptr<i32>, %w: !ep.window) warps_per_block(1) {
  // expected-error @+1 {{buffer part @total has no offset a kernel can compute: the parts before it end at a runtime-sized offset that is not always a multiple of its alignment (16 bytes)}}
  %at = ep.buffer_offset @total : index
  %value = ep.load %map[%at] : !ep.ptr<i32>
}

// -----

ep.param @rows : index {runtime}
// expected-error @+1 {{kernel @count reads a runtime parameter left unbound, but takes no !ep.window to read it from}}
ep.kernel @count(%out: !ep.ptr<i32>) warps_per_block(1) {
  %c0 = arith.constant 0 : index
  %rows = ep.param_value @rows : index
  %value = arith.index_cast %rows : index to i32
  ep.store %value, %out[%c0] : !ep.ptr<i32>
}
