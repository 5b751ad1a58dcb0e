// ep_peer_copy: the SM-driven peer-write ceiling epjit-bench measures EP
// kernels against: every warp copies whole rows (grid-stride) from local
// memory into a peer's copy of a one-region window, with nothing else done.
//   source: [rows, row_words] i32; the window holds window_rows such rows.
ep.param @row_words : index {min = 1 : i64}
ep.param @window_rows : index {min = 1 : i64}

ep.window_region @buffer : i32 {
  %rows = ep.param_value @window_rows : index
  %row_words = ep.param_value @row_words : index
  %words = arith.muli %rows, %row_words : index
  ep.yield %words : index
}

ep.kernel @ep_peer_copy(%source: !ep.ptr<i32>, %rows: index, %peer: index, %w: !ep.window) warps_per_block(16) {
  %c0 = arith.constant 0 : index
  %row_words = ep.param_value @row_words : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %row = %first to %rows step %stride {
    %at = arith.muli %row, %row_words : index
    %target = ep.peer_ptr %w[%peer] @buffer[%at] : !ep.ptr<i32>
    ep.warp.copy_row %source[%at], %target[%c0], %row_words : !ep.ptr<i32> -> !ep.ptr<i32>
  }
}
