// ep/dispatch: each token goes once to every distinct rank its experts live
// on, with its weights, indices, opaque scales and origin. Slots come from an
// atomic counter on the destination; a replay reads the slots a recorded
// dispatch took instead.
//
// route (the op's or a Routing's): the "route" buffer of ep/buffers, whose
// parts say what each word holds.
ep.include "ep/common"
ep.include "ep/buffers"
ep.include "ep/sync"
ep.include "ep/internode"

// The destination ordinal a row carries in its origin words: `n`, the
// token's send target number; forwarding, where a token's targets are not
// all its destinations, the number of `dest` among its destination ranks
// (what the receiver's origins report, as intranode; a rail peer's row is
// renumbered when forwarded).
func.func private @destination_ordinal(%indices: !ep.ptr<i32>, %row: index, %dest: index, %n: index,
                                       %rank: index, %forwarding: i1) -> index {
  %ordinal = scf.if %forwarding -> (index) {
    %false = arith.constant false
    %among_ranks = func.call @rank_ordinal(%indices, %row, %dest, %rank, %false)
        : (!ep.ptr<i32>, index, index, index, i1) -> index
    scf.yield %among_ranks : index
  } else {
    scf.yield %n : index
  }
  return %ordinal : index
}

// One warp sends token `token` to slot `slot` on rank `dest`, its
// destination number `ordinal`: the row, its weights, indices and scales,
// and its origin.
func.func private @send_token(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                              %indices: !ep.ptr<i32>, %token: index, %dest: index, %slot: index,
                              %ordinal: index, %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %token_words = ep.param_value @token_words : index
  %scale_bytes = ep.param_value @scale_bytes : index
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %row = arith.muli %token, %topk : index
  %words_at = arith.muli %token, %token_words : index
  %recv_words = arith.muli %slot, %token_words : index
  %to_tokens = ep.peer_ptr %w[%dest] @recv_tokens[%recv_words] : !ep.ptr<i32>
  ep.warp.copy_row %input[%words_at], %to_tokens[%c0], %token_words : !ep.ptr<i32> -> !ep.ptr<i32>
  %recv_row = arith.muli %slot, %topk : index
  %to_weights = ep.peer_ptr %w[%dest] @recv_weights[%recv_row] : !ep.ptr<f32>
  ep.warp.copy_row %weights[%row], %to_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
  %to_indices = ep.peer_ptr %w[%dest] @recv_indices[%recv_row] : !ep.ptr<i32>
  ep.warp.copy_row %indices[%row], %to_indices[%c0], %topk : !ep.ptr<i32> -> !ep.ptr<i32>
  %scale_at = arith.muli %token, %scale_bytes : index
  %recv_scale_at = arith.muli %slot, %scale_bytes : index
  %to_scales = ep.peer_ptr %w[%dest] @recv_scales[%recv_scale_at] : !ep.ptr<i8>
  ep.warp.copy_row %scales[%scale_at], %to_scales[%c0], %scale_bytes : !ep.ptr<i8> -> !ep.ptr<i8>
  %origin_at = arith.muli %slot, %c2 : index
  %to_origin = ep.peer_ptr %w[%dest] @recv_origin[%origin_at] : !ep.ptr<i32>
  %rank_i32 = arith.index_cast %rank : index to i32
  %max_tokens_i32 = arith.index_cast %max_tokens : index to i32
  %token_i32 = arith.index_cast %token : index to i32
  %origin_base = arith.muli %rank_i32, %max_tokens_i32 : i32
  %origin = arith.addi %origin_base, %token_i32 : i32
  %ordinal_i32 = arith.index_cast %ordinal : index to i32
  ep.store %origin, %to_origin[%c0] : !ep.ptr<i32>
  ep.store %ordinal_i32, %to_origin[%c1] : !ep.ptr<i32>
  return
}

// The route entry of a sent (or refused) token: `taken` is the slot the
// sender got on `dest`, or the route's recorded entry when replaying. Writes
// the route (-1 where the slot is past capacity, with error 2) and returns
// the slot, or capacity when there is none.
func.func private @record_slot(%route: !ep.ptr<i32>, %route_at: index, %dest: index, %taken: i32,
                               %replaying: i1, %w: !ep.window, %rank: index) -> index {
  %c0 = arith.constant 0 : index
  %none = arith.constant -1 : i32
  %true = arith.constant true
  %error_word = ep.constant_value @state_error : index
  %over_capacity = ep.constant_value @error_capacity_exceeded : i32
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %slot_i32 = scf.if %replaying -> (i32) {
    %recorded = ep.load %route[%route_at] : !ep.ptr<i32>
    %recorded_slot = arith.remsi %recorded, %capacity_i32 : i32
    scf.yield %recorded_slot : i32
  } else {
    %dest_i32 = arith.index_cast %dest : index to i32
    %base = arith.muli %dest_i32, %capacity_i32 : i32
    %entry = arith.addi %base, %taken : i32
    ep.store %entry, %route[%route_at] : !ep.ptr<i32>
    scf.yield %taken : i32
  }
  %slot = arith.index_cast %slot_i32 : i32 to index
  %fits = arith.cmpi ult, %slot, %capacity : index
  %overflow = arith.xori %fits, %true : i1
  scf.if %overflow {
    // Not sent: combine skips the entry (the call's results are void; check() says why).
    ep.store %none, %route[%route_at] : !ep.ptr<i32>
    ep.atomic_store %over_capacity, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
  }
  %kept = arith.select %fits, %slot, %capacity : index
  return %kept : index
}

// Reports the token's bad experts (error 3; masked ones are fine) and
// closes its route: -1 past its destinations.
func.func private @check_token(%indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %token: index,
                               %w: !ep.window, %rank: index, %forwarding: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %none = arith.constant -1 : i32
  %true = arith.constant true
  %error_word = ep.constant_value @state_error : index
  %bad_expert = ep.constant_value @error_expert_out_of_range : i32
  %no_expert = ep.constant_value @expert_none : i32
  %topk = ep.param_value @topk : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %row = arith.muli %token, %topk : index
  scf.for %j = %c0 to %topk step %c1 {
    %at = arith.addi %row, %j : index
    %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
    %invalid = func.call @invalid_expert(%expert_i32) : (i32) -> i1
    %masked = arith.cmpi eq, %expert_i32, %no_expert : i32
    %unmasked = arith.xori %masked, %true : i1
    %bad = arith.andi %invalid, %unmasked : i1
    scf.if %bad {
      ep.atomic_store %bad_expert, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
    }
  }
  %destinations = func.call @destinations_before(%indices, %row, %topk, %rank, %forwarding)
      : (!ep.ptr<i32>, index, index, index, i1) -> index
  scf.for %tail = %destinations to %topk step %c1 {
    %tail_at = arith.addi %row, %tail : index
    ep.store %none, %route[%tail_at] : !ep.ptr<i32>
  }
  return
}

// Sends top-k entry `entry` (token entry / topk, its entry entry % topk)
// when it is the first to name its rank: one remote atomic for the slot,
// then the copy. The token's first entry also checks the token.
func.func private @send_entry(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                              %indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %entry: index, %rank: index,
                              %replaying: i1, %forwarding: i1, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i32
  %counter_word = ep.constant_value @state_recv_counter : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %capacity = ep.param_value @capacity : index
  %token = arith.divui %entry, %topk : index
  %j = arith.remui %entry, %topk : index
  %row = arith.muli %token, %topk : index
  %first_entry = arith.cmpi eq, %j, %c0 : index
  scf.if %first_entry {
    func.call @check_token(%indices, %route, %token, %w, %rank, %forwarding)
        : (!ep.ptr<i32>, !ep.ptr<i32>, index, !ep.window, index, i1) -> ()
  }
  %at = arith.addi %row, %j : index
  %bit = func.call @rank_bit(%indices, %at, %rank, %forwarding) : (!ep.ptr<i32>, index, index, i1) -> i64
  %earlier = func.call @ranks_before(%indices, %row, %j, %rank, %forwarding)
      : (!ep.ptr<i32>, index, index, index, i1) -> i64
  %known = arith.andi %earlier, %bit : i64
  %is_new = arith.cmpi eq, %known, %zero : i64
  %is_valid = arith.cmpi ne, %bit, %zero : i64
  %opens = arith.andi %is_new, %is_valid : i1
  scf.if %opens {
    %n = func.call @rank_count(%earlier) : (i64) -> index
    %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
    %expert = arith.index_cast %expert_i32 : i32 to index
    %owner = arith.divui %expert, %epr : index
    %dest = func.call @send_target(%rank, %owner, %forwarding) : (index, index, i1) -> index
    %entries_at = ep.buffer_offset @route_entries : index
    %row_at = arith.addi %entries_at, %row : index
    %route_at = arith.addi %row_at, %n : index
    %taken = scf.if %replaying -> (i32) {
      %unused = arith.constant 0 : i32
      scf.yield %unused : i32
    } else {
      %counter = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
      %got = ep.atomic_rmw add %counter[%counter_word], %one scope(system) order(relaxed) : !ep.ptr<i32>
      scf.yield %got : i32
    }
    %slot = func.call @record_slot(%route, %route_at, %dest, %taken, %replaying, %w, %rank)
        : (!ep.ptr<i32>, index, index, i32, i1, !ep.window, index) -> index
    %fits = arith.cmpi ult, %slot, %capacity : index
    scf.if %fits {
      %ordinal = func.call @destination_ordinal(%indices, %row, %dest, %n, %rank, %forwarding)
          : (!ep.ptr<i32>, index, index, index, index, i1) -> index
      func.call @send_token(%input, %weights, %scales, %indices, %token, %dest, %slot, %ordinal, %rank, %w)
          : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, index, index, index, index, index, !ep.window) -> ()
    }
  }
  return
}

// Whole tokens per warp (tokens first, first + stride, ...), destination by
// destination: the warp counts its tokens for a rank, reserves that many
// slots there with one remote atomic, then sends them. Warps start at
// different ranks so the links share the load. One remote atomic per
// (warp, destination) instead of one per (token, destination): the atomic's
// round trip (about a microsecond over NVLink) no longer stalls every copy.
func.func private @send_tokens_reserved(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                                        %indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index,
                                        %rank: index, %replaying: i1, %forwarding: i1, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %one_i64 = arith.constant 1 : i64
  %counter_word = ep.constant_value @state_recv_counter : index
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %capacity = ep.param_value @capacity : index
  // Warps counted block by block: a call of fewer tokens than warps copies
  // on every SM, not on the first tokens / warps-per-block of them.
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    func.call @check_token(%indices, %route, %token, %w, %rank, %forwarding)
        : (!ep.ptr<i32>, !ep.ptr<i32>, index, !ep.window, index, i1) -> ()
  }
  %start = arith.addi %rank, %first : index
  scf.for %step = %c0 to %world step %c1 {
    %turn = arith.addi %start, %step : index
    %dest = arith.remui %turn, %world : index
    %dest_i64 = arith.index_cast %dest : index to i64
    %count = scf.for %token = %first to %tokens step %stride iter_args(%n = %zero) -> (i32) {
      %row = arith.muli %token, %topk : index
      %ranks = func.call @ranks_before(%indices, %row, %topk, %rank, %forwarding)
          : (!ep.ptr<i32>, index, index, index, i1) -> i64
      %shifted = arith.shrui %ranks, %dest_i64 : i64
      %bit = arith.andi %shifted, %one_i64 : i64
      %bit_i32 = arith.trunci %bit : i64 to i32
      %more = arith.addi %n, %bit_i32 : i32
      scf.yield %more : i32
    }
    %sends = arith.cmpi sgt, %count, %zero : i32
    scf.if %sends {
      %base = scf.if %replaying -> (i32) {
        scf.yield %zero : i32
      } else {
        %counter = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
        %got = ep.atomic_rmw add %counter[%counter_word], %count scope(system) order(relaxed) : !ep.ptr<i32>
        scf.yield %got : i32
      }
      %sent = scf.for %token = %first to %tokens step %stride iter_args(%taken = %base) -> (i32) {
        %row = arith.muli %token, %topk : index
        %ranks = func.call @ranks_before(%indices, %row, %topk, %rank, %forwarding)
          : (!ep.ptr<i32>, index, index, index, i1) -> i64
        %shifted = arith.shrui %ranks, %dest_i64 : i64
        %bit = arith.andi %shifted, %one_i64 : i64
        %skips = arith.cmpi ne, %bit, %one_i64 : i64
        %next = scf.if %skips -> (i32) {
          scf.yield %taken : i32
        } else {
          %n = func.call @rank_ordinal(%indices, %row, %dest, %rank, %forwarding)
              : (!ep.ptr<i32>, index, index, index, i1) -> index
          %entries_at = ep.buffer_offset @route_entries : index
          %row_at = arith.addi %entries_at, %row : index
          %route_at = arith.addi %row_at, %n : index
          %slot = func.call @record_slot(%route, %route_at, %dest, %taken, %replaying, %w, %rank)
              : (!ep.ptr<i32>, index, index, i32, i1, !ep.window, index) -> index
          %fits = arith.cmpi ult, %slot, %capacity : index
          scf.if %fits {
            %ordinal = func.call @destination_ordinal(%indices, %row, %dest, %n, %rank, %forwarding)
                : (!ep.ptr<i32>, index, index, index, index, i1) -> index
            func.call @send_token(%input, %weights, %scales, %indices, %token, %dest, %slot, %ordinal, %rank, %w)
                : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, index, index, index, index, index, !ep.window) -> ()
          }
          %taken_next = arith.addi %taken, %one : i32
          scf.yield %taken_next : i32
        }
        scf.yield %next : i32
      }
    }
  }
  return
}

// Dispatch of a tiny call (no more top-k entries than blocks): block b
// sends top-k entry b when it has one (`has_entry`), whose expert
// `expert_i32` ep_dispatch read while its state words were on their way
// (both computed there once). Every warp of the block
// decides alike (the entry's checks read the same indices); warp 0 takes
// the slot and records it in the route, the block's barrier publishes it,
// and each warp copies its share of the row (whole 16-byte chunks) while
// warps 1-3 copy the weights, indices and scales and warp 0 the origin, so
// no warp has more than one round of loads.
func.func private @send_entries_by_block(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                                         %indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %has_entry: i1,
                                         %rank: index, %replaying: i1, %forwarding: i1, %expert_i32: i32,
                                         %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %none = arith.constant -1 : i32
  %true = arith.constant true
  %no_rank = arith.constant 0 : i64
  %error_word = ep.constant_value @state_error : index
  %counter_word = ep.constant_value @state_recv_counter : index
  %over_capacity = ep.constant_value @error_capacity_exceeded : i32
  %token_words = ep.param_value @token_words : index
  %scale_bytes = ep.param_value @scale_bytes : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %max_tokens = ep.param_value @max_tokens : index
  %capacity = ep.param_value @capacity : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %rank_i32 = arith.index_cast %rank : index to i32
  %max_tokens_i32 = arith.index_cast %max_tokens : index to i32
  %capacity_i32 = arith.index_cast %capacity : index to i32

  %block = ep.block_index : index
  %blocks = ep.block_count : index
  %warp = ep.warp_index : index
  %all_warps = ep.global_warp_count : index
  %warps = arith.divui %all_warps, %blocks : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  %weights_warp = arith.remui %c1, %warps : index
  %indices_warp = arith.remui %c2, %warps : index
  %scales_warp = arith.remui %c3, %warps : index
  %copies_weights = arith.cmpi eq, %warp, %weights_warp : index
  %copies_indices = arith.cmpi eq, %warp, %indices_warp : index
  %copies_scales = arith.cmpi eq, %warp, %scales_warp : index
  // This warp's share of a row: [piece_at, piece_at + piece_count) words, a
  // whole number of 16-byte chunks except at the row's end.
  %share = arith.addi %token_words, %warps : index
  %share_1 = arith.subi %share, %c1 : index
  %words_per_warp = arith.divui %share_1, %warps : index
  %chunk_span = arith.addi %words_per_warp, %c3 : index
  %piece_chunks = arith.divui %chunk_span, %c4 : index
  %piece_words = arith.muli %piece_chunks, %c4 : index
  %piece_at = arith.muli %warp, %piece_words : index
  %piece_end = arith.addi %piece_at, %piece_words : index
  %past_row = arith.cmpi ugt, %piece_end, %token_words : index
  %clipped_end = arith.select %past_row, %token_words, %piece_end : index
  %has_piece = arith.cmpi ult, %piece_at, %token_words : index
  %clipped_count = arith.subi %clipped_end, %piece_at : index
  %piece_count = arith.select %has_piece, %clipped_count, %c0 : index

  scf.if %has_entry {
    %token = arith.divui %block, %topk : index
    %j = arith.remui %block, %topk : index
    %row = arith.muli %token, %topk : index
    %first_entry = arith.cmpi eq, %j, %c0 : index
    %checks = arith.andi %first_entry, %lead : i1
    scf.if %checks {
      func.call @check_token(%indices, %route, %token, %w, %rank, %forwarding)
        : (!ep.ptr<i32>, !ep.ptr<i32>, index, !ep.window, index, i1) -> ()
    }
    %bit = func.call @rank_bit_of(%expert_i32, %rank, %forwarding) : (i32, index, i1) -> i64
    %earlier = func.call @ranks_before(%indices, %row, %j, %rank, %forwarding)
        : (!ep.ptr<i32>, index, index, index, i1) -> i64
    %known = arith.andi %earlier, %bit : i64
    %is_new = arith.cmpi eq, %known, %no_rank : i64
    %is_valid = arith.cmpi ne, %bit, %no_rank : i64
    %opens = arith.andi %is_new, %is_valid : i1
    scf.if %opens {
      %n = func.call @rank_count(%earlier) : (i64) -> index
      %expert = arith.index_cast %expert_i32 : i32 to index
      %owner = arith.divui %expert, %epr : index
      %dest = func.call @send_target(%rank, %owner, %forwarding) : (index, index, i1) -> index
      %entries_at = ep.buffer_offset @route_entries : index
      %row_at = arith.addi %entries_at, %row : index
      %route_at = arith.addi %row_at, %n : index
      %not_replaying = arith.xori %replaying, %true : i1
      %takes_slot = arith.andi %lead, %not_replaying : i1
      %words_at = arith.muli %token, %token_words : index
      %from_words = arith.addi %words_at, %piece_at : index
      // The warp's piece of the row is loaded while warp 0 takes the slot;
      // the counter's address first, so that an AMD wave, whose loads
      // complete in order, need not wait for the row to start the atomic.
      %counter = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
      %slot, %fits = ep.warp.copy_row_around %input[%from_words], %piece_count : !ep.ptr<i32> -> index, i1 {
        scf.if %takes_slot {
          %taken = ep.atomic_rmw add %counter[%counter_word], %one scope(system) order(relaxed) : !ep.ptr<i32>
          %taken_fits = arith.cmpi slt, %taken, %capacity_i32 : i32
          %dest_i32 = arith.index_cast %dest : index to i32
          %base = arith.muli %dest_i32, %capacity_i32 : i32
          %entry_value = arith.addi %base, %taken : i32
          %recorded_value = arith.select %taken_fits, %entry_value, %none : i32
          ep.store %recorded_value, %route[%route_at] : !ep.ptr<i32>
        }
        ep.block_barrier
        // The slot, as recorded by warp 0 just now or by the dispatch being
        // replayed; -1: it did not fit (combine skips the entry).
        %recorded = ep.load %route[%route_at] : !ep.ptr<i32>
        %slot_fits = arith.cmpi sge, %recorded, %zero : i32
        %overflow = arith.xori %slot_fits, %true : i1
        %reports = arith.andi %overflow, %lead : i1
        scf.if %reports {
          ep.atomic_store %over_capacity, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
        }
        %slot_i32 = arith.remsi %recorded, %capacity_i32 : i32
        %kept_slot_i32 = arith.select %slot_fits, %slot_i32, %zero : i32
        %kept_slot = arith.index_cast %kept_slot_i32 : i32 to index
        %recv_words = arith.muli %kept_slot, %token_words : index
        %to_words = arith.addi %recv_words, %piece_at : index
        %to_tokens = ep.peer_ptr %w[%dest] @recv_tokens[%to_words] : !ep.ptr<i32>
        ep.copy_to %slot_fits, %to_tokens : !ep.ptr<i32> yield %kept_slot, %slot_fits : index, i1
      }
      scf.if %fits {
        %recv_row = arith.muli %slot, %topk : index
        scf.if %copies_weights {
          %to_weights = ep.peer_ptr %w[%dest] @recv_weights[%recv_row] : !ep.ptr<f32>
          ep.warp.copy_row %weights[%row], %to_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
        }
        scf.if %copies_indices {
          %to_indices = ep.peer_ptr %w[%dest] @recv_indices[%recv_row] : !ep.ptr<i32>
          ep.warp.copy_row %indices[%row], %to_indices[%c0], %topk : !ep.ptr<i32> -> !ep.ptr<i32>
        }
        scf.if %copies_scales {
          %scale_at = arith.muli %token, %scale_bytes : index
          %recv_scale_at = arith.muli %slot, %scale_bytes : index
          %to_scales = ep.peer_ptr %w[%dest] @recv_scales[%recv_scale_at] : !ep.ptr<i8>
          ep.warp.copy_row %scales[%scale_at], %to_scales[%c0], %scale_bytes : !ep.ptr<i8> -> !ep.ptr<i8>
        }
        scf.if %lead {
          %origin_at = arith.muli %slot, %c2 : index
          %to_origin = ep.peer_ptr %w[%dest] @recv_origin[%origin_at] : !ep.ptr<i32>
          %token_i32 = arith.index_cast %token : index to i32
          %origin_base = arith.muli %rank_i32, %max_tokens_i32 : i32
          %origin = arith.addi %origin_base, %token_i32 : i32
          %ordinal = func.call @destination_ordinal(%indices, %row, %dest, %n, %rank, %forwarding)
              : (!ep.ptr<i32>, index, index, index, index, i1) -> index
          %ordinal_i32 = arith.index_cast %ordinal : index to i32
          ep.store %origin, %to_origin[%c0] : !ep.ptr<i32>
          ep.store %ordinal_i32, %to_origin[%c1] : !ep.ptr<i32>
        }
      }
    }
  }
  return
}

// After a dispatch meeting (or, forwarding, the forward meeting): the
// received count, counted or recorded, read with the error word in one
// round (the flags' acquire already ordered every sender's increment before
// these loads, so they need no acquire of their own; @stop_after_timeout
// reads the error word); published as the rows that fit, recorded in the
// route, and the counter cleared.
func.func private @publish_received(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %replaying: i1) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %true = arith.constant true
  %total_word = ep.constant_value @state_total_recv : index
  %counter_word = ep.constant_value @state_recv_counter : index
  %node_word = ep.constant_value @state_node_recv : index
  %total_at = ep.buffer_offset @route_received : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %counted = ep.atomic_load %state[%counter_word] scope(system) order(relaxed) : !ep.ptr<i32>
  %recorded = ep.load %route[%total_at] : !ep.ptr<i32>
  func.call @stop_after_timeout(%w, %rank) : (!ep.window, index) -> ()
  %received = arith.select %replaying, %recorded, %counted : i32
  %counting = arith.xori %replaying, %true : i1
  scf.if %counting {
    ep.atomic_store %zero, %state[%counter_word] scope(system) order(relaxed) : !ep.ptr<i32>
    ep.store %counted, %route[%total_at] : !ep.ptr<i32>
  }
  // More than capacity arrived only with error 2 set; the rows that fit are valid.
  %overflow = arith.cmpi sgt, %received, %capacity_i32 : i32
  %kept = arith.select %overflow, %capacity_i32, %received : i32
  ep.store %kept, %state[%total_word] : !ep.ptr<i32>
  // Internode v2_ll, ep_internode_ingest appends the other nodes' rows after these.
  ep.store %kept, %state[%node_word] : !ep.ptr<i32>
  return
}

// Words [0, count) of `from` to `to`, split among `parts` warps, this warp
// being `part`: each copies one run of whole 16-byte lines (4 words), so
// every run starts on a line.
func.func private @copy_words_in_runs(%from: !ep.ptr<i32>, %to: !ep.ptr<i32>, %count: index, %part: index,
                                      %parts: index) {
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %count_up = arith.addi %count, %c3 : index
  %lines = arith.divui %count_up, %c4 : index
  %parts_less_one = arith.subi %parts, %c1 : index
  %lines_up = arith.addi %lines, %parts_less_one : index
  %lines_per_part = arith.divui %lines_up, %parts : index
  %per_part = arith.muli %lines_per_part, %c4 : index
  %begin = arith.muli %part, %per_part : index
  %after = arith.addi %begin, %per_part : index
  %past_end = arith.cmpi ugt, %after, %count : index
  %end = arith.select %past_end, %count, %after : index
  %has_run = arith.cmpi ult, %begin, %end : index
  scf.if %has_run {
    %run = arith.subi %end, %begin : index
    ep.warp.copy_row %from[%begin], %to[%begin], %run : !ep.ptr<i32> -> !ep.ptr<i32>
  }
  return
}

// forward != 0 (internode v2): tokens for other nodes go to their rail
// peers (@send_target), which forward them after the transfer; the receive
// counter then also counts forwarded rows, so ep_internode_forward's last
// block, not this one, reads and clears it.
// keep != 0 (a recording dispatch that keeps its call): the caller's indices
// are also copied to kept_indices (in the routing), so the recorded call
// still has them after the caller reuses its buffer; each warp copies one
// run of whole 16-byte lines. They are read through kept_from, the same
// indices passed again: it must start on a 16-byte line, which `indices`
// need not (with top-6, indices[1:] starts mid-line and is read one word at
// a time), so the interface record asks 16 bytes of kept_from alone.
// keep_origins != 0 (the same, where the runtime leaves it to the kernel:
// one node, a call of up to 1024 tokens): once every peer's rows are in and
// the last block's lead warp has published their count, that block's warps
// (told by ep.block_any) copy the received rows' origins to kept_origins.
// phases (@phase_send, @phase_receive): the send half sends and arrives; the
// receive half, launched alone on one block, waits for every rank on its
// lead warp and does what the last block of a one-phase call does after its
// arrival. Both read the same epoch: only the receive half stores it.
// count_on_device != 0: the call moves the first *token_count of its
// `tokens` rows (@call_tokens), so one graph captured at the op's
// maximum serves every batch size; the combine kernels read the same count.
ep.kernel @ep_dispatch(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                       %indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index, %rank: index,
                       %replay: index, %forward: index, %kept_from: !ep.ptr<i32>, %kept_indices: !ep.ptr<i32>,
                       %keep: index, %kept_origins: !ep.ptr<i32>, %keep_origins: index, %phases: index,
                       %token_count: !ep.ptr<i32>, %count_on_device: index,
                       %w: !ep.window) warps_per_block(4) {
  // The epoch is read before the stopped check so both loads are in flight at once.
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i32
  %epoch_word = ep.constant_value @state_epoch : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %previous = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  %send_phase = ep.constant_value @phase_send : index
  %receive_phase = ep.constant_value @phase_receive : index
  %sending = func.call @runs_phase(%phases, %send_phase) : (index, index) -> i1
  %receiving = func.call @runs_phase(%phases, %receive_phase) : (index, index) -> i1
  %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
  // A tiny call (no more top-k entries than blocks) gives each entry a whole
  // block: one warp takes the slot, then every warp copies its share of the
  // row, so the row crosses in one round of loads. The block's expert is
  // read here, in flight with the state words (it reads the caller's
  // indices, nothing a peer writes); the token's other indices share its
  // line, so the entry's checks then read them from the cache.
  %topk = ep.param_value @topk : index
  %entries = arith.muli %moved, %topk : index
  %blocks = ep.block_count : index
  %by_block = arith.cmpi ule, %entries, %blocks : index
  %block = ep.block_index : index
  %has_entry = arith.cmpi ult, %block, %entries : index
  %sends_by_block = arith.andi %by_block, %sending : i1
  %reads_entry = arith.andi %sends_by_block, %has_entry : i1
  %early_expert = scf.if %reads_entry -> (i32) {
    %expert = ep.load %indices[%block] : !ep.ptr<i32>
    scf.yield %expert : i32
  } else {
    %none = ep.constant_value @expert_none : i32
    scf.yield %none : i32
  }
  %keep_asked = arith.cmpi ne, %keep, %c0 : index
  %keeping = arith.andi %keep_asked, %sending : i1
  scf.if %keeping {
    %warp = ep.global_warp_index : index
    %warps = ep.global_warp_count : index
    func.call @copy_words_in_runs(%kept_from, %kept_indices, %entries, %warp, %warps)
        : (!ep.ptr<i32>, !ep.ptr<i32>, index, index, index) -> ()
  }
  scf.if %answered {
    %c2 = arith.constant 2 : index
    %arrivals = ep.constant_value @state_dispatch_arrivals : index
    %dispatch_meeting = ep.constant_value @meeting_dispatch : index
    %replaying = arith.cmpi ne, %replay, %c0 : index
    %forwarding = arith.cmpi ne, %forward, %c0 : index
    %epoch = arith.addi %previous, %one : i32

    // The last block to finish tells every rank this one is done (its lead
    // warp gets true); a receive half alone is led by its block's warp 0.
    %last = scf.if %sending -> (i1) {
      scf.if %by_block {
        func.call @send_entries_by_block(%input, %weights, %scales, %indices, %route, %has_entry, %rank, %replaying,
                                         %forwarding, %early_expert, %w)
            : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, !ep.ptr<i32>, i1, index, i1, i1, i32, !ep.window) -> ()
      } else {
        // At most two top-k entries per warp: one entry per work item, so a
        // small call's copies to different ranks run on different warps and
        // its latency is one slot reservation and one row copy. More: whole
        // tokens per warp, with the warp's slots on each destination reserved
        // at once.
        %first = ep.global_warp_index : index
        %stride = ep.global_warp_count : index
        %two_per_warp = arith.muli %stride, %c2 : index
        %split = arith.cmpi ule, %entries, %two_per_warp : index
        scf.if %split {
          scf.for %entry = %first to %entries step %stride {
            func.call @send_entry(%input, %weights, %scales, %indices, %route, %entry, %rank, %replaying, %forwarding, %w)
                : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, i1, i1, !ep.window) -> ()
          }
        } else {
          func.call @send_tokens_reserved(%input, %weights, %scales, %indices, %route, %moved, %rank, %replaying, %forwarding, %w)
              : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, i1, i1, !ep.window) -> ()
        }
      }
      %arrived_last = func.call @arrive(%w, %rank, %epoch, %arrivals, %dispatch_meeting) : (!ep.window, index, i32, index, index) -> i1
      scf.yield %arrived_last : i1
    } else {
      %warp = ep.warp_index : index
      %lead_warp = arith.cmpi eq, %warp, %c0 : index
      %first_block = arith.cmpi eq, %block, %c0 : index
      %leads = arith.andi %lead_warp, %first_block : i1
      scf.yield %leads : i1
    }

    // That warp waits for all of them, then publishes what arrived and
    // clears the receive counter (forwarding: ep_internode_forward does, later).
    %finishes = arith.andi %last, %receiving : i1
    scf.if %finishes {
      func.call @poll_all(%w, %rank, %epoch, %dispatch_meeting) : (!ep.window, index, i32, index) -> ()
      scf.if %forwarding {
        func.call @stop_after_timeout(%w, %rank) : (!ep.window, index) -> ()
      } else {
        func.call @publish_received(%w, %rank, %route, %replaying) : (!ep.window, index, !ep.ptr<i32>, i1) -> ()
      }
      func.call @seal_outboxes(%w, %rank, %route, %replaying) : (!ep.window, index, !ep.ptr<i32>, i1) -> ()
      // Read only by this rank's later kernels, which the stream orders after this one.
      ep.atomic_store %epoch, %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
    }
    // Every warp of the last block, once its lead warp has published what
    // arrived, copies a run of the received rows' origins (two words a row).
    %keep_origins_asked = arith.cmpi ne, %keep_origins, %c0 : index
    %keeping_origins = arith.andi %keep_origins_asked, %receiving : i1
    scf.if %keeping_origins {
      %last_block = ep.block_any %finishes
      scf.if %last_block {
        %total_word = ep.constant_value @state_total_recv : index
        %kept = ep.load %state[%total_word] : !ep.ptr<i32>
        %rows = arith.index_cast %kept : i32 to index
        %words = arith.muli %rows, %c2 : index
        %origins = ep.peer_ptr %w[%rank] @recv_origin[%c0] : !ep.ptr<i32>
        %warp = ep.warp_index : index
        %all_warps = ep.global_warp_count : index
        %warps = arith.divui %all_warps, %blocks : index
        func.call @copy_words_in_runs(%origins, %kept_origins, %words, %warp, %warps)
            : (!ep.ptr<i32>, !ep.ptr<i32>, index, index, index) -> ()
      }
    }
  }
}
