// ep.buffer_part and ep.buffer_offset refuse what cannot be laid out or found.
// RUN: epjit-opt %s -split-input-file -verify-diagnostics --ep-specialize

// expected-error @+1 {{part @odd has align 6; an alignment is a power of two and a multiple of the element size (4 bytes)}}
ep.buffer_part @odd in "map" : i32 attributes {align = 6 : i64} {
  %c1 = arith.constant 1 : index
  ep.yield %c1 : index
}

// -----

ep.kernel @read(%map: !ep.ptr<i32>) warps_per_block(1) {
  // expected-error @+1 {{@missing is not a declared ep.buffer_part}}
  %at = ep.buffer_offset @missing : index
  %value = ep.load %map[%at] : !ep.ptr<i32>
}

// -----

// expected-error @+1 {{the count of buffer part @varies is not a constant after specialization}}
ep.buffer_part @varies in "map" : i32 {
  %warp = ep.warp_index : index
  ep.yield %warp : index
}
