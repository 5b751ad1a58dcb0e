// ep_dispatch_combine: the kernels of one EpDispatchCombineOp (docs/EP.md).
//
// Every rank runs the same kernels on its own stream; ranks meet only through
// the symmetric window below, with system-scope atomics and bounded waits.
// Cross-rank counters reset themselves: a kernel that counts arrivals has its
// last warp clear the counter, and "everyone arrived" is an epoch number in
// the signal flags (flag >= epoch), so dispatch -> combine replays with no host
// work. The epoch is advanced by each dispatch; combine and std-MoE use it.
//
// Kernels (args in order):
//   ep_dispatch(input words, weights f32, scales bytes, indices i32, route i32,
//               tokens, rank, replay, window)
//   ep_combine_gather(input rows, weights f32, out rows, out weights f32,
//               route i32, tokens, rank, has_weights, staged, window)
//   ep_combine_scatter(input rows, weights f32, out rows, out weights f32,
//               route i32, tokens, rank, has_weights, window)
//   ep_std_moe_pack(out bf16 [experts_per_rank, world * max_tokens, hidden],
//               counts i32 [experts_per_rank], source i32 [same rows], rank, window)
//   ep_std_moe_unpack(expert out bf16 [same layout], combine input bf16 [capacity, hidden],
//               rank, window)
// route: per source token, its distinct destinations in order of first
// appearance as rank * capacity + slot, then -1s; route[max_tokens * topk]
// holds the rank's received count of the dispatch that wrote it.

ep.param @token_words : index {min = 1 : i64}       // dispatched row in 4-byte words
ep.param @scale_bytes : index                       // opaque per-token scales (0: none)
ep.param @hidden : index {min = 1 : i64}
ep.param @topk : index {min = 1 : i64}
ep.param @experts_per_rank : index {min = 1 : i64}
ep.param @world : index {min = 1 : i64}
ep.param @max_tokens : index {min = 1 : i64}        // per rank and call
ep.param @capacity : index {min = 1 : i64}          // tokens one rank can receive
ep.param @quant : index                             // scatter combine: 0 none, 1 fp8 direct, 2 fp8 blockwise
ep.param @chunk : index {min = 128 : i64, multiple_of = 128 : i64}  // elements a warp sums at a time (whole fp8 blocks)
ep.param @combine_elem : !ep.row_elem<"combine_elem">

// The symmetric window; the runtime lays out the same regions in this order
// (runtime/ep/window_layout.cpp).
ep.window_region @state            // i32 words, kState* below
ep.window_region @signals          // i32 [2 * world]: dispatch arrivals, then combine arrivals
ep.window_region @recv_tokens      // i32 [capacity * token_words]
ep.window_region @recv_weights     // f32 [capacity * topk]
ep.window_region @recv_scales      // i8 [capacity * scale_bytes]
ep.window_region @recv_indices     // i32 [capacity * topk]
ep.window_region @recv_origin      // i32 [capacity * 2]: source rank * max_tokens + token, destination ordinal
ep.window_region @combine_rows     // combine_elem [capacity * hidden]: gather staging
ep.window_region @combine_weights  // f32 [capacity * topk]: gather staging
ep.window_region @scatter_rows     // [max_tokens * topk * hidden] combine_elem, or fp8 bytes under quant
ep.window_region @scatter_scales   // f32 [max_tokens * topk * ceil(hidden / 128)]
ep.window_region @scatter_weights  // f32 [max_tokens * topk * topk]
ep.window_region @accumulator      // f32 [warps * chunk]: each warp's running sum, local
ep.window_region @dequantized      // f32 [warps * chunk]: each warp's dequantized contribution, local
ep.window_region @moe_counts       // i32 [experts_per_rank], local
ep.window_region @moe_slots        // i32 [capacity * topk]: std-MoE position of (token, k)

// State words. Error codes in kStateError: 1 a peer did not arrive in time,
// 2 more tokens arrived than capacity, 3 an expert index out of range.

// The calling warp's arrival at a cross-rank meeting: counts the warps of
// this rank in state[counter]; the last one resets the count and raises this
// rank's flag (signals[base + rank] = epoch) on every rank. Returns true on
// the last warp.
func.func private @arrive(%w: !ep.window, %rank: index, %epoch: i32, %counter: index, %base: index) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %world = ep.param_value @world : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  ep.fence scope(system) order(release)
  %before = ep.atomic_rmw add %state[%counter], %one scope(agent) order(acq_rel) : !ep.ptr<i32>
  %warps = ep.global_warp_count : index
  %warps_i32 = arith.index_cast %warps : index to i32
  %last_count = arith.subi %warps_i32, %one : i32
  %last = arith.cmpi eq, %before, %last_count : i32
  scf.if %last {
    ep.atomic_store %zero, %state[%counter] scope(agent) order(relaxed) : !ep.ptr<i32>
    %slot = arith.addi %base, %rank : index
    scf.for %peer = %c0 to %world step %c1 {
      %flags = ep.peer_ptr %w[%peer] @signals[%c0] : !ep.ptr<i32>
      ep.atomic_store %epoch, %flags[%slot] scope(system) order(release) : !ep.ptr<i32>
    }
  }
  return %last : i1
}

// Waits until every rank has raised its flag signals[base + r] to `epoch`.
// A rank that never comes sets error 1 instead of hanging.
func.func private @wait_for_all(%w: !ep.window, %rank: index, %epoch: i32, %base: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %world = ep.param_value @world : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %flags = ep.peer_ptr %w[%rank] @signals[%base] : !ep.ptr<i32>
  scf.for %peer = %c0 to %world step %c1 {
    %ok = ep.wait_until %flags[%peer] ge %epoch scope(system) max_spins(200000000)
        error(%state[%c3], 1) : !ep.ptr<i32>, !ep.ptr<i32>
  }
  return
}

// Is expert `indices[row + j]` on the same rank (or, with same_expert, the
// same expert) as one of indices[row .. row + j)?
func.func private @repeats_earlier(%indices: !ep.ptr<i32>, %row: index, %j: index, %same_expert: i1) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %false = arith.constant false
  %epr = ep.param_value @experts_per_rank : index
  %at = arith.addi %row, %j : index
  %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
  %expert = arith.index_cast %expert_i32 : i32 to index
  %rank = arith.divui %expert, %epr : index
  %key = arith.select %same_expert, %expert, %rank : index
  %seen = scf.for %i = %c0 to %j step %c1 iter_args(%found = %false) -> (i1) {
    %earlier_at = arith.addi %row, %i : index
    %earlier_i32 = ep.load %indices[%earlier_at] : !ep.ptr<i32>
    %earlier = arith.index_cast %earlier_i32 : i32 to index
    %earlier_rank = arith.divui %earlier, %epr : index
    %earlier_key = arith.select %same_expert, %earlier, %earlier_rank : index
    %match = arith.cmpi eq, %earlier_key, %key : index
    %any = arith.ori %found, %match : i1
    scf.yield %any : i1
  }
  return %seen : i1
}

func.func @ep_dispatch(%input: !ep.ptr<i32>, %weights: !ep.ptr<f32>, %scales: !ep.ptr<i8>,
                       %indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index, %rank: index,
                       %replay: index, %w: !ep.window) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c6 = arith.constant 6 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %none = arith.constant -1 : i32
  %two_i32 = arith.constant 2 : i32
  %three_i32 = arith.constant 3 : i32
  %false = arith.constant false
  %true = arith.constant true
  %token_words = ep.param_value @token_words : index
  %scale_bytes = ep.param_value @scale_bytes : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %capacity = ep.param_value @capacity : index
  %experts = arith.muli %world, %epr : index
  %replaying = arith.cmpi ne, %replay, %c0 : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %previous = ep.atomic_load %state[%c0] scope(agent) order(relaxed) : !ep.ptr<i32>
  %epoch = arith.addi %previous, %one : i32
  %rank_i32 = arith.index_cast %rank : index to i32
  %max_tokens_i32 = arith.index_cast %max_tokens : index to i32
  %capacity_i32 = arith.index_cast %capacity : index to i32

  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %topk : index
    %token_i32 = arith.index_cast %token : index to i32
    %origin_base = arith.muli %rank_i32, %max_tokens_i32 : i32
    %origin = arith.addi %origin_base, %token_i32 : i32
    // One copy per distinct destination rank; n counts them.
    %sent = scf.for %j = %c0 to %topk step %c1 iter_args(%n = %c0) -> (index) {
      %at = arith.addi %row, %j : index
      %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
      %expert = arith.index_cast %expert_i32 : i32 to index
      %negative = arith.cmpi slt, %expert_i32, %zero : i32
      %beyond = arith.cmpi uge, %expert, %experts : index
      %invalid = arith.ori %negative, %beyond : i1
      %next = scf.if %invalid -> (index) {
        ep.atomic_store %three_i32, %state[%c3] scope(system) order(relaxed) : !ep.ptr<i32>
        scf.yield %n : index
      } else {
        %repeat = func.call @repeats_earlier(%indices, %row, %j, %false) : (!ep.ptr<i32>, index, index, i1) -> i1
        %after = scf.if %repeat -> (index) {
          scf.yield %n : index
        } else {
          %dest = arith.divui %expert, %epr : index
          %route_at = arith.addi %row, %n : index
          // The slot on the destination: recorded (replay) or taken from its counter.
          %slot_i32 = scf.if %replaying -> (i32) {
            %recorded = ep.load %route[%route_at] : !ep.ptr<i32>
            %recorded_slot = arith.remsi %recorded, %capacity_i32 : i32
            scf.yield %recorded_slot : i32
          } else {
            %counter = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
            %taken = ep.atomic_rmw add %counter[%c6], %one scope(system) order(relaxed) : !ep.ptr<i32>
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
          }
          scf.if %fits {
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
            %ordinal = arith.index_cast %n : index to i32
            ep.store %origin, %to_origin[%c0] : !ep.ptr<i32>
            ep.store %ordinal, %to_origin[%c1] : !ep.ptr<i32>
          } else {
            ep.atomic_store %two_i32, %state[%c3] scope(system) order(relaxed) : !ep.ptr<i32>
          }
          %n_next = arith.addi %n, %c1 : index
          scf.yield %n_next : index
        }
        scf.yield %after : index
      }
      scf.yield %next : index
    }
    scf.for %j = %sent to %topk step %c1 {
      %route_at = arith.addi %row, %j : index
      ep.store %none, %route[%route_at] : !ep.ptr<i32>
    }
  }

  // The last warp tells every rank this one is done, waits for all of them,
  // then publishes what arrived and clears the receive counter.
  %last = func.call @arrive(%w, %rank, %epoch, %c1, %c0) : (!ep.window, index, i32, index, index) -> i1
  scf.if %last {
    func.call @wait_for_all(%w, %rank, %epoch, %c0) : (!ep.window, index, i32, index) -> ()
    %total_at = arith.muli %max_tokens, %topk : index
    %received = scf.if %replaying -> (i32) {
      %recorded = ep.load %route[%total_at] : !ep.ptr<i32>
      scf.yield %recorded : i32
    } else {
      %counted = ep.atomic_load %state[%c6] scope(system) order(acquire) : !ep.ptr<i32>
      ep.atomic_store %zero, %state[%c6] scope(system) order(relaxed) : !ep.ptr<i32>
      ep.store %counted, %route[%total_at] : !ep.ptr<i32>
      scf.yield %counted : i32
    }
    // More than capacity arrived only with error 2 set; the rows that fit are valid.
    %overflow = arith.cmpi sgt, %received, %capacity_i32 : i32
    %kept = arith.select %overflow, %capacity_i32, %received : i32
    ep.store %kept, %state[%c2] : !ep.ptr<i32>
    ep.atomic_store %epoch, %state[%c0] scope(system) order(release) : !ep.ptr<i32>
  }
  return
}

// Gather combine: every rank stages its expert outputs in its window; after
// all ranks have, each origin token reads its contributions from its
// destinations and sums them in f32, in destination order (the first one
// converted, the others accumulated), rounding once.
func.func @ep_combine_gather(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                             %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                             %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                             %staged: index, %w: !ep.window) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c0_i32 = arith.constant 0 : i32
  %chunk = ep.param_value @chunk : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %weighted = arith.cmpi ne, %has_weights, %c0 : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%c0] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%c2] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index

  // Stage this rank's expert outputs where the origins can read them (unless
  // they were written there: op.combine_input()).
  %copy_rows = arith.cmpi eq, %staged, %c0 : index
  scf.for %i = %first to %total step %stride {
    %at = arith.muli %i, %hidden : index
    scf.if %copy_rows {
      %rows = ep.peer_ptr %w[%rank] @combine_rows[%at] : !ep.ptr<!ep.row_elem<"combine_elem">>
      ep.warp.copy_row %input[%at], %rows[%c0], %hidden
          : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
    }
    scf.if %weighted {
      %weights_at = arith.muli %i, %topk : index
      %staged_weights = ep.peer_ptr %w[%rank] @combine_weights[%weights_at] : !ep.ptr<f32>
      ep.warp.copy_row %in_weights[%weights_at], %staged_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
    }
  }
  %last = func.call @arrive(%w, %rank, %epoch, %c4, %world) : (!ep.window, index, i32, index, index) -> i1
  func.call @wait_for_all(%w, %rank, %epoch, %world) : (!ep.window, index, i32, index) -> ()

  // Each origin token reads its contributions from its destinations, a chunk
  // of the row at a time summed in the warp's own f32 scratch (cache-resident).
  %scratch_at = arith.muli %first, %chunk : index
  %acc = ep.peer_ptr %w[%rank] @accumulator[%scratch_at] : !ep.ptr<f32>
  // Work items are (token, chunk) pairs, so a few tokens still spread over many warps.
  %chunk_span = arith.addi %hidden, %chunk : index
  %chunk_span_1 = arith.subi %chunk_span, %c1 : index
  %chunks = arith.divui %chunk_span_1, %chunk : index
  %items = arith.muli %tokens, %chunks : index
  scf.for %item = %first to %items step %stride {
    %token = arith.divui %item, %chunks : index
    %chunk_index = arith.remui %item, %chunks : index
    %c = arith.muli %chunk_index, %chunk : index
    %row = arith.muli %token, %topk : index
    %out_at = arith.muli %token, %hidden : index
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %chunk : index
      %n = arith.select %short, %left, %chunk : index
      scf.for %j = %c0 to %topk step %c1 {
        %route_at = arith.addi %row, %j : index
        %entry = ep.load %route[%route_at] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        scf.if %valid {
          %dest_i32 = arith.divsi %entry, %capacity_i32 : i32
          %slot_i32 = arith.remsi %entry, %capacity_i32 : i32
          %dest = arith.index_cast %dest_i32 : i32 to index
          %slot = arith.index_cast %slot_i32 : i32 to index
          %src_row = arith.muli %slot, %hidden : index
          %src_at = arith.addi %src_row, %c : index
          %src = ep.peer_ptr %w[%dest] @combine_rows[%src_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
          %is_first = arith.cmpi eq, %j, %c0 : index
          scf.if %is_first {
            ep.warp.copy_row %src[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
          } else {
            ep.warp.accumulate %src[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
          }
        }
      }
      %out_chunk = arith.addi %out_at, %c : index
      ep.warp.copy_row %acc[%c0], %output[%out_chunk], %n : !ep.ptr<f32> -> !ep.ptr<!ep.row_elem<"combine_elem">>
    %first_chunk = arith.cmpi eq, %chunk_index, %c0 : index
    %weights_here = arith.andi %weighted, %first_chunk : i1
    scf.if %weights_here {
      scf.for %j = %c0 to %topk step %c1 {
        %route_at = arith.addi %row, %j : index
        %entry = ep.load %route[%route_at] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        scf.if %valid {
          %dest_i32 = arith.divsi %entry, %capacity_i32 : i32
          %slot_i32 = arith.remsi %entry, %capacity_i32 : i32
          %dest = arith.index_cast %dest_i32 : i32 to index
          %slot = arith.index_cast %slot_i32 : i32 to index
          %src_weights_at = arith.muli %slot, %topk : index
          %src_weights = ep.peer_ptr %w[%dest] @combine_weights[%src_weights_at] : !ep.ptr<f32>
          %is_first = arith.cmpi eq, %j, %c0 : index
          scf.if %is_first {
            ep.warp.copy_row %src_weights[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          } else {
            ep.warp.accumulate %src_weights[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          }
        }
      }
    }
  }
  return
}

// Scatter combine: stage 1 writes each received token's expert output into
// its origin's inbox (row token * topk + destination ordinal), compressed to
// the target's fp8 under quant; after all ranks have, stage 3 sums each of
// this rank's tokens from its inbox in f32, in destination order.
func.func @ep_combine_scatter(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                              %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                              %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                              %w: !ep.window) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %chunk = ep.param_value @chunk : index
  %c127 = arith.constant 127 : index
  %c128 = arith.constant 128 : index
  %c0_i32 = arith.constant 0 : i32
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %quant = ep.param_value @quant : index
  %direct = arith.cmpi eq, %quant, %c1 : index
  %blockwise = arith.cmpi eq, %quant, %c2 : index
  %padded = arith.addi %hidden, %c127 : index
  %blocks = arith.divui %padded, %c128 : index
  %weighted = arith.cmpi ne, %has_weights, %c0 : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%c0] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%c2] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  %origins = ep.peer_ptr %w[%rank] @recv_origin[%c0] : !ep.ptr<i32>

  scf.for %i = %first to %total step %stride {
    %origin_at = arith.muli %i, %c2 : index
    %ordinal_at = arith.addi %origin_at, %c1 : index
    %origin_i32 = ep.load %origins[%origin_at] : !ep.ptr<i32>
    %ordinal_i32 = ep.load %origins[%ordinal_at] : !ep.ptr<i32>
    %origin = arith.index_cast %origin_i32 : i32 to index
    %ordinal = arith.index_cast %ordinal_i32 : i32 to index
    %source = arith.divui %origin, %max_tokens : index
    %token = arith.remui %origin, %max_tokens : index
    %box_base = arith.muli %token, %topk : index
    %box = arith.addi %box_base, %ordinal : index
    %src_at = arith.muli %i, %hidden : index
    %dst_at = arith.muli %box, %hidden : index
    scf.if %direct {
      %codes = ep.peer_ptr %w[%source] @scatter_rows[%dst_at] : !ep.ptr<i8>
      ep.warp.quantize %input[%src_at], %codes[%c0], %hidden {format = #ep.fp8<target>}
          : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<i8>
    } else {
      scf.if %blockwise {
        %codes = ep.peer_ptr %w[%source] @scatter_rows[%dst_at] : !ep.ptr<i8>
        %scales_at = arith.muli %box, %blocks : index
        %scales = ep.peer_ptr %w[%source] @scatter_scales[%scales_at] : !ep.ptr<f32>
        ep.warp.quantize %input[%src_at], %codes[%c0], %hidden scales %scales[%c0]
            {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
            : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<i8>, !ep.ptr<f32>
      } else {
        %rows = ep.peer_ptr %w[%source] @scatter_rows[%dst_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
        ep.warp.copy_row %input[%src_at], %rows[%c0], %hidden
            : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
      }
    }
    scf.if %weighted {
      %weights_at = arith.muli %i, %topk : index
      %box_weights_at = arith.muli %box, %topk : index
      %box_weights = ep.peer_ptr %w[%source] @scatter_weights[%box_weights_at] : !ep.ptr<f32>
      ep.warp.copy_row %in_weights[%weights_at], %box_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
    }
  }
  %last = func.call @arrive(%w, %rank, %epoch, %c4, %world) : (!ep.window, index, i32, index, index) -> i1
  func.call @wait_for_all(%w, %rank, %epoch, %world) : (!ep.window, index, i32, index) -> ()

  // Each token's inbox rows, a chunk at a time in the warp's own scratch.
  %scratch_at = arith.muli %first, %chunk : index
  %acc = ep.peer_ptr %w[%rank] @accumulator[%scratch_at] : !ep.ptr<f32>
  %scratch = ep.peer_ptr %w[%rank] @dequantized[%scratch_at] : !ep.ptr<f32>
  // Work items are (token, chunk) pairs, so a few tokens still spread over many warps.
  %chunk_span = arith.addi %hidden, %chunk : index
  %chunk_span_1 = arith.subi %chunk_span, %c1 : index
  %chunks = arith.divui %chunk_span_1, %chunk : index
  %items = arith.muli %tokens, %chunks : index
  scf.for %item = %first to %items step %stride {
    %token = arith.divui %item, %chunks : index
    %chunk_index = arith.remui %item, %chunks : index
    %c = arith.muli %chunk_index, %chunk : index
    %row = arith.muli %token, %topk : index
    %out_at = arith.muli %token, %hidden : index
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %chunk : index
      %n = arith.select %short, %left, %chunk : index
      %first_block = arith.divui %c, %c128 : index
      scf.for %j = %c0 to %topk step %c1 {
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        scf.if %valid {
          %is_first = arith.cmpi eq, %j, %c0 : index
          %box_row = arith.muli %box, %hidden : index
          %box_at = arith.addi %box_row, %c : index
          scf.if %direct {
            %codes = ep.peer_ptr %w[%rank] @scatter_rows[%box_at] : !ep.ptr<i8>
            scf.if %is_first {
              ep.warp.dequantize %codes[%c0], %acc[%c0], %n {format = #ep.fp8<target>} : !ep.ptr<i8> -> !ep.ptr<f32>
            } else {
              ep.warp.dequantize %codes[%c0], %scratch[%c0], %n {format = #ep.fp8<target>} : !ep.ptr<i8> -> !ep.ptr<f32>
              ep.warp.accumulate %scratch[%c0], %acc[%c0], %n : !ep.ptr<f32> -> !ep.ptr<f32>
            }
          } else {
            scf.if %blockwise {
              %codes = ep.peer_ptr %w[%rank] @scatter_rows[%box_at] : !ep.ptr<i8>
              %scales_row = arith.muli %box, %blocks : index
              %scales_at = arith.addi %scales_row, %first_block : index
              %scales = ep.peer_ptr %w[%rank] @scatter_scales[%scales_at] : !ep.ptr<f32>
              scf.if %is_first {
                ep.warp.dequantize %codes[%c0], %acc[%c0], %n scales %scales[%c0]
                    {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
                    : !ep.ptr<i8> -> !ep.ptr<f32>, !ep.ptr<f32>
              } else {
                ep.warp.dequantize %codes[%c0], %scratch[%c0], %n scales %scales[%c0]
                    {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
                    : !ep.ptr<i8> -> !ep.ptr<f32>, !ep.ptr<f32>
                ep.warp.accumulate %scratch[%c0], %acc[%c0], %n : !ep.ptr<f32> -> !ep.ptr<f32>
              }
            } else {
              %rows = ep.peer_ptr %w[%rank] @scatter_rows[%box_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
              scf.if %is_first {
                ep.warp.copy_row %rows[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
              } else {
                ep.warp.accumulate %rows[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
              }
            }
          }
        }
      }
      %out_chunk = arith.addi %out_at, %c : index
      ep.warp.copy_row %acc[%c0], %output[%out_chunk], %n : !ep.ptr<f32> -> !ep.ptr<!ep.row_elem<"combine_elem">>
    %first_chunk = arith.cmpi eq, %chunk_index, %c0 : index
    %weights_here = arith.andi %weighted, %first_chunk : i1
    scf.if %weights_here {
      scf.for %j = %c0 to %topk step %c1 {
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        scf.if %valid {
          %is_first = arith.cmpi eq, %j, %c0 : index
          %box_weights_at = arith.muli %box, %topk : index
          %box_weights = ep.peer_ptr %w[%rank] @scatter_weights[%box_weights_at] : !ep.ptr<f32>
          scf.if %is_first {
            ep.warp.copy_row %box_weights[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          } else {
            ep.warp.accumulate %box_weights[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          }
        }
      }
    }
  }
  return
}

// Standard MoE, out of dispatch: every received token once per local expert
// it routes to, packed per expert in arrival order, with its receive slot as
// the source map and the per-expert counts. The last warp publishes the
// counts and clears them for the next call.
func.func @ep_std_moe_pack(%packed: !ep.ptr<bf16>, %counts: !ep.ptr<i32>, %sources: !ep.ptr<i32>,
                           %rank: index, %w: !ep.window) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c5 = arith.constant 5 : index
  %one = arith.constant 1 : i32
  %zero = arith.constant 0 : i32
  %true = arith.constant true
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %rows_per_expert = arith.muli %world, %max_tokens : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%c2] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %moe_counts = ep.peer_ptr %w[%rank] @moe_counts[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %i = %first to %total step %stride {
    %row = arith.muli %i, %topk : index
    %i_i32 = arith.index_cast %i : index to i32
    %token_at = arith.muli %i, %hidden : index
    %token = ep.peer_ptr %w[%rank] @recv_tokens[%c0] : !ep.ptr<bf16>
    scf.for %j = %c0 to %topk step %c1 {
      %at = arith.addi %row, %j : index
      %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
      %expert = arith.index_cast %expert_i32 : i32 to index
      %owner = arith.divui %expert, %epr : index
      %here = arith.cmpi eq, %owner, %rank : index
      scf.if %here {
        %repeat = func.call @repeats_earlier(%indices, %row, %j, %true) : (!ep.ptr<i32>, index, index, i1) -> i1
        %fresh = arith.xori %repeat, %true : i1
        scf.if %fresh {
          %local = arith.remui %expert, %epr : index
          %position_i32 = ep.atomic_rmw add %moe_counts[%local], %one scope(agent) order(relaxed) : !ep.ptr<i32>
          %position = arith.index_cast %position_i32 : i32 to index
          %packed_row_base = arith.muli %local, %rows_per_expert : index
          %packed_row = arith.addi %packed_row_base, %position : index
          %packed_at = arith.muli %packed_row, %hidden : index
          ep.warp.copy_row %token[%token_at], %packed[%packed_at], %hidden : !ep.ptr<bf16> -> !ep.ptr<bf16>
          ep.store %i_i32, %sources[%packed_row] : !ep.ptr<i32>
          ep.store %position_i32, %slots[%at] : !ep.ptr<i32>
        }
      }
    }
  }
  // The last warp publishes the counts and clears them for the next call.
  ep.fence scope(agent) order(release)
  %before = ep.atomic_rmw add %state[%c5], %one scope(agent) order(acq_rel) : !ep.ptr<i32>
  %warps = ep.global_warp_count : index
  %warps_i32 = arith.index_cast %warps : index to i32
  %last_count = arith.subi %warps_i32, %one : i32
  %last = arith.cmpi eq, %before, %last_count : i32
  scf.if %last {
    ep.atomic_store %zero, %state[%c5] scope(agent) order(relaxed) : !ep.ptr<i32>
    scf.for %e = %c0 to %epr step %c1 {
      %count = ep.atomic_load %moe_counts[%e] scope(agent) order(relaxed) : !ep.ptr<i32>
      ep.store %count, %counts[%e] : !ep.ptr<i32>
      ep.atomic_store %zero, %moe_counts[%e] scope(agent) order(relaxed) : !ep.ptr<i32>
    }
  }
  return
}

// Standard MoE, back into combine: each received token's row is the f32 sum
// of its local experts' output rows (in top-k order), rounded once to bf16.
func.func @ep_std_moe_unpack(%expert_out: !ep.ptr<bf16>, %combine_in: !ep.ptr<bf16>, %rank: index,
                             %w: !ep.window) attributes {ep.kernel = {warps_per_block = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %true = arith.constant true
  %false = arith.constant false
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %rows_per_expert = arith.muli %world, %max_tokens : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%c2] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  %chunk = ep.param_value @chunk : index
  %scratch_at = arith.muli %first, %chunk : index
  %acc = ep.peer_ptr %w[%rank] @accumulator[%scratch_at] : !ep.ptr<f32>
  scf.for %i = %first to %total step %stride {
    %row = arith.muli %i, %topk : index
    %out_at = arith.muli %i, %hidden : index
    scf.for %c = %c0 to %hidden step %chunk {
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %chunk : index
      %n = arith.select %short, %left, %chunk : index
      %seen = scf.for %j = %c0 to %topk step %c1 iter_args(%any = %false) -> (i1) {
        %at = arith.addi %row, %j : index
        %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
        %expert = arith.index_cast %expert_i32 : i32 to index
        %owner = arith.divui %expert, %epr : index
        %here = arith.cmpi eq, %owner, %rank : index
        %counted = scf.if %here -> (i1) {
          %repeat = func.call @repeats_earlier(%indices, %row, %j, %true) : (!ep.ptr<i32>, index, index, i1) -> i1
          %fresh = arith.xori %repeat, %true : i1
          scf.if %fresh {
            %local = arith.remui %expert, %epr : index
            %position_i32 = ep.load %slots[%at] : !ep.ptr<i32>
            %position = arith.index_cast %position_i32 : i32 to index
            %packed_row_base = arith.muli %local, %rows_per_expert : index
            %packed_row = arith.addi %packed_row_base, %position : index
            %packed_row_at = arith.muli %packed_row, %hidden : index
            %packed_at = arith.addi %packed_row_at, %c : index
            scf.if %any {
              ep.warp.accumulate %expert_out[%packed_at], %acc[%c0], %n : !ep.ptr<bf16> -> !ep.ptr<f32>
            } else {
              ep.warp.copy_row %expert_out[%packed_at], %acc[%c0], %n : !ep.ptr<bf16> -> !ep.ptr<f32>
            }
          }
          %now = arith.ori %any, %fresh : i1
          scf.yield %now : i1
        } else {
          scf.yield %any : i1
        }
        scf.yield %counted : i1
      }
      %out_chunk = arith.addi %out_at, %c : index
      ep.warp.copy_row %acc[%c0], %combine_in[%out_chunk], %n : !ep.ptr<f32> -> !ep.ptr<bf16>
    }
  }
  return
}
