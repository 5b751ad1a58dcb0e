// ep/narrow: a framework's int64 top-k ids (DeepEP's, vLLM's and SGLang's
// index type) into the op's int32 copy (@narrow_indices), which the
// dispatch and combine kernels then read. One launch from the op, in place of
// a cast a framework layer would run before every call. A value outside
// int32 becomes INT32_MAX (ep.warp.copy_row), so the dispatch reports an
// expert out of range instead of routing a wrapped id.
ep.include "ep/common"

// Warp w copies segments w, w + warps, ... of 512 entries each: one step of
// a warp's lanes at sm90's 8 chunks of two in flight, so every lane's loads
// are out before its first store.
ep.kernel @ep_narrow_indices(%wide: !ep.ptr<i64>, %narrow: !ep.ptr<i32>, %entries: index) warps_per_block(4) {
  %segment = arith.constant 512 : index
  %segments = func.call @ceil_div(%entries, %segment) : (index, index) -> index
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  scf.for %s = %first to %segments step %warps {
    %begin = arith.muli %s, %segment : index
    %after = arith.addi %begin, %segment : index
    %past = arith.cmpi ugt, %after, %entries : index
    %end = arith.select %past, %entries, %after : index
    %count = arith.subi %end, %begin : index
    ep.warp.copy_row %wide[%begin], %narrow[%begin], %count : !ep.ptr<i64> -> !ep.ptr<i32>
  }
}
