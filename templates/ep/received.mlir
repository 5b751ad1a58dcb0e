// ep/received: the received rows of the dispatch awaiting combine, handed to
// the caller in tensors of its own, as a framework's normal-mode dispatch
// returns them (DeepEP's recv_x, recv_x_scales, recv_topk_idx and
// recv_topk_weights): the rows and their scales copied, and each row's top-k
// as local expert ids, -1 where the expert lives on another rank (or the
// slot is -1), with the weights of the local entries and 0 elsewhere. One
// launch where a framework layer would run a copy per tensor and several
// masking ops.
ep.include "ep/common"

// Rows [0, rows) of the caller's tensors: a received row is copied; a row
// past the received count (`rows` may be a worst case, so no host needs the
// count first) keeps its token and scale bytes as they were and gets -1 ids
// and 0 weights. The ids and the weights are written where asked for
// (has_ids, has_weights): a replayed dispatch's caller takes the rows alone.
// Warp w of the grid copies rows w, w + warps, ... and takes top-k entries
// (row * top-k + j) w, w + warps, ...: an entry's two loads, then its two
// stores, so a row's entries are not a chain of dependent round trips.
ep.kernel @ep_deliver_received(%tokens_out: !ep.ptr<i32>, %scales_out: !ep.ptr<i8>, %local_ids: !ep.ptr<i64>,
                               %weights_out: !ep.ptr<f32>, %has_ids: index, %has_weights: index, %rows: index, %rank: index,
                               %w: !ep.window) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %none = arith.constant -1 : i64
  %no_weight = arith.constant 0.0 : f32
  %token_words = ep.param_value @token_words : index
  %scale_bytes = ep.param_value @scale_bytes : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %first_local = arith.muli %rank, %epr : index
  %first_local_i64 = arith.index_cast %first_local : index to i64
  %epr_i64 = arith.index_cast %epr : index to i64
  %zero_i64 = arith.constant 0 : i64
  %with_ids = arith.cmpi ne, %has_ids, %c0 : index
  %weighted = arith.cmpi ne, %has_weights, %c0 : index
  %entries_wanted = arith.ori %with_ids, %weighted : i1
  %recv_tokens = ep.peer_ptr %w[%rank] @recv_tokens[%c0] : !ep.ptr<i32>
  %recv_scales = ep.peer_ptr %w[%rank] @recv_scales[%c0] : !ep.ptr<i8>
  %recv_indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %recv_weights = ep.peer_ptr %w[%rank] @recv_weights[%c0] : !ep.ptr<f32>
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  scf.for %row = %first to %rows step %warps {
    %received = arith.cmpi ult, %row, %total : index
    scf.if %received {
      %words_at = arith.muli %row, %token_words : index
      ep.warp.copy_row %recv_tokens[%words_at], %tokens_out[%words_at], %token_words : !ep.ptr<i32> -> !ep.ptr<i32>
      %scale_at = arith.muli %row, %scale_bytes : index
      ep.warp.copy_row %recv_scales[%scale_at], %scales_out[%scale_at], %scale_bytes : !ep.ptr<i8> -> !ep.ptr<i8>
    }
  }
  %all_entries = arith.muli %rows, %topk : index
  %entries = arith.select %entries_wanted, %all_entries, %c0 : index
  scf.for %at = %first to %entries step %warps {
    %row = arith.divui %at, %topk : index
    %received = arith.cmpi ult, %row, %total : index
    %expert_i32 = scf.if %received -> (i32) {
      %loaded = ep.load %recv_indices[%at] : !ep.ptr<i32>
      scf.yield %loaded : i32
    } else {
      %none_i32 = arith.constant -1 : i32
      scf.yield %none_i32 : i32
    }
    %weight_read = arith.andi %received, %weighted : i1
    %received_weight = scf.if %weight_read -> (f32) {
      %value = ep.load %recv_weights[%at] : !ep.ptr<f32>
      scf.yield %value : f32
    } else {
      scf.yield %no_weight : f32
    }
    %expert = arith.extsi %expert_i32 : i32 to i64
    %offset = arith.subi %expert, %first_local_i64 : i64
    %above = arith.cmpi sge, %offset, %zero_i64 : i64
    %below = arith.cmpi slt, %offset, %epr_i64 : i64
    %in_range = arith.andi %above, %below : i1
    %here = arith.andi %in_range, %received : i1
    %local = arith.select %here, %offset, %none : i64
    scf.if %with_ids {
      ep.store %local, %local_ids[%at] : !ep.ptr<i64>
    }
    scf.if %weighted {
      %weight = arith.select %here, %received_weight, %no_weight : f32
      ep.store %weight, %weights_out[%at] : !ep.ptr<f32>
    }
  }
}
