// ep/internode_v2: the throughput internode kernels (docs/EP.md "Internode").
// A token crosses the network once per destination node: ep_dispatch (with
// forward != 0) sends it to the node's rail peer (@send_target) through
// that peer's outbox, the runtime moves each outbox to its inbox (one
// transfer per remote node), and ep_internode_forward hands every inbox row
// to its destinations on the node through the node's windows, taking their
// slots from the same receive counters as the node's own rows.
//
// Combine is a two-level sum: ep_internode_partials stages this rank's
// expert outputs, meets the node, and sums, in f32 and destination order,
// each forwarded row's node contributions (one partial per (token, node),
// sent back to its origin) and each of its own tokens' own-node ones; after
// the transfer back, ep_internode_sum adds a token's node partials in f32,
// its own node's first and then the others' in route order, and rounds
// once. reference::combine follows the same order.
//
// The forward route (the runtime's, after the route's words) records where
// each forwarded row went: entry [(source_node * per_source + row) * topk +
// n] is the n-th of its on-node destinations, rank * capacity + slot, or -1.
ep.include "ep/common"
ep.include "ep/sync"
ep.include "ep/dispatch"
ep.include "ep/internode"

// One warp forwards inbox row `box` (also the forward route's row: both are
// [source node][per_source]) to its n-th destination on this node, `dest`: a slot there (counted, or
// recorded when replaying), then the row, its weights, indices, scales and
// origin.
func.func private @forward_to(%tokens_in: !ep.ptr<i32>, %weights_in: !ep.ptr<f32>, %scales_in: !ep.ptr<i8>,
                              %indices_in: !ep.ptr<i32>, %origins_in: !ep.ptr<i32>, %forward_route: !ep.ptr<i32>,
                              %box: index, %n: index, %dest: index, %replaying: i1,
                              %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %one = arith.constant 1 : i32
  %counter_word = ep.constant_value @state_recv_counter : index
  %token_words = ep.param_value @token_words : index
  %scale_bytes = ep.param_value @scale_bytes : index
  %topk = ep.param_value @topk : index
  %capacity = ep.param_value @capacity : index
  %forwarded_row = arith.muli %box, %topk : index
  %route_at = arith.addi %forwarded_row, %n : index
  %taken = scf.if %replaying -> (i32) {
    %unused = arith.constant 0 : i32
    scf.yield %unused : i32
  } else {
    %counter = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
    %got = ep.atomic_rmw add %counter[%counter_word], %one scope(system) order(relaxed) : !ep.ptr<i32>
    scf.yield %got : i32
  }
  %slot = func.call @record_slot(%forward_route, %route_at, %dest, %taken, %replaying, %w, %rank)
      : (!ep.ptr<i32>, index, index, i32, i1, !ep.window, index) -> index
  %fits = arith.cmpi ult, %slot, %capacity : index
  scf.if %fits {
    %from_words = arith.muli %box, %token_words : index
    %to_words = arith.muli %slot, %token_words : index
    %to_tokens = ep.peer_ptr %w[%dest] @recv_tokens[%to_words] : !ep.ptr<i32>
    ep.warp.copy_row %tokens_in[%from_words], %to_tokens[%c0], %token_words : !ep.ptr<i32> -> !ep.ptr<i32>
    %from_row = arith.muli %box, %topk : index
    %to_row = arith.muli %slot, %topk : index
    %to_weights = ep.peer_ptr %w[%dest] @recv_weights[%to_row] : !ep.ptr<f32>
    ep.warp.copy_row %weights_in[%from_row], %to_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
    %to_indices = ep.peer_ptr %w[%dest] @recv_indices[%to_row] : !ep.ptr<i32>
    ep.warp.copy_row %indices_in[%from_row], %to_indices[%c0], %topk : !ep.ptr<i32> -> !ep.ptr<i32>
    %from_scales = arith.muli %box, %scale_bytes : index
    %to_scales_at = arith.muli %slot, %scale_bytes : index
    %to_scales = ep.peer_ptr %w[%dest] @recv_scales[%to_scales_at] : !ep.ptr<i8>
    ep.warp.copy_row %scales_in[%from_scales], %to_scales[%c0], %scale_bytes : !ep.ptr<i8> -> !ep.ptr<i8>
    // The origin as sent; the ordinal is `dest`'s among the token's destinations.
    %from_origin = arith.muli %box, %c2 : index
    %to_origin_at = arith.muli %slot, %c2 : index
    %to_origin = ep.peer_ptr %w[%dest] @recv_origin[%to_origin_at] : !ep.ptr<i32>
    %origin = ep.load %origins_in[%from_origin] : !ep.ptr<i32>
    %false = arith.constant false
    %ordinal = func.call @rank_ordinal(%indices_in, %from_row, %dest, %rank, %false)
        : (!ep.ptr<i32>, index, index, index, i1) -> index
    %ordinal_i32 = arith.index_cast %ordinal : index to i32
    ep.store %origin, %to_origin[%c0] : !ep.ptr<i32>
    ep.store %ordinal_i32, %to_origin[%c1] : !ep.ptr<i32>
  }
  return
}

// One warp forwards inbox row `box` to each rank of this node its experts
// live on, in order of first appearance, and closes its forward route row
// with -1s. The indices crossed the network: an invalid expert names no
// rank (@rank_bit), so a crafted row reaches no window it should not.
func.func private @forward_row(%tokens_in: !ep.ptr<i32>, %weights_in: !ep.ptr<f32>, %scales_in: !ep.ptr<i8>,
                               %indices_in: !ep.ptr<i32>, %origins_in: !ep.ptr<i32>, %forward_route: !ep.ptr<i32>,
                               %box: index, %replaying: i1, %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %none = arith.constant -1 : i32
  %no_rank = arith.constant 0 : i64
  %false = arith.constant false
  %true = arith.constant true
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %row = arith.muli %box, %topk : index
  %targets:2 = scf.for %j = %c0 to %topk step %c1 iter_args(%seen = %no_rank, %n = %c0) -> (i64, index) {
    %at = arith.addi %row, %j : index
    %bit = func.call @rank_bit(%indices_in, %at, %rank, %false) : (!ep.ptr<i32>, index, index, i1) -> i64
    %known = arith.andi %seen, %bit : i64
    %is_new = arith.cmpi eq, %known, %no_rank : i64
    %is_valid = arith.cmpi ne, %bit, %no_rank : i64
    %fresh = arith.andi %is_new, %is_valid : i1
    %expert_i32 = ep.load %indices_in[%at] : !ep.ptr<i32>
    %expert = arith.index_cast %expert_i32 : i32 to index
    %dest = arith.divui %expert, %epr : index
    %elsewhere = func.call @off_node(%rank, %dest) : (index, index) -> i1
    %here = arith.xori %elsewhere, %true : i1
    %opens = arith.andi %fresh, %here : i1
    scf.if %opens {
      func.call @forward_to(%tokens_in, %weights_in, %scales_in, %indices_in, %origins_in, %forward_route, %box,
                            %n, %dest, %replaying, %rank, %w)
          : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, index,
             i1, index, !ep.window) -> ()
    }
    %n_more = arith.addi %n, %c1 : index
    %n_next = arith.select %opens, %n_more, %n : index
    %seen_next = arith.ori %seen, %bit : i64
    scf.yield %seen_next, %n_next : i64, index
  }
  %forwarded_row = arith.muli %box, %topk : index
  scf.for %tail = %targets#1 to %topk step %c1 {
    %tail_at = arith.addi %forwarded_row, %tail : index
    ep.store %none, %forward_route[%tail_at] : !ep.ptr<i32>
  }
  return
}

// After the dispatch transfer: every inbox row (from the rank of this
// rank's place on each other node; inbox blocks are [node][per_source]) goes
// to its destinations here; then the
// node meets, and each rank publishes what its counter took, direct and
// forwarded rows alike, and clears it.
ep.kernel @ep_internode_forward(%counts: !ep.ptr<i32>, %tokens_in: !ep.ptr<i32>, %weights_in: !ep.ptr<f32>,
                                %scales_in: !ep.ptr<i8>, %indices_in: !ep.ptr<i32>, %origins_in: !ep.ptr<i32>,
                                %forward_route: !ep.ptr<i32>, %route: !ep.ptr<i32>, %replay: index,
                                %per_source: index, %rank: index, %w: !ep.window) warps_per_block(4)
    when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  // ep_dispatch's last block raised the epoch this call meets at.
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %arrivals = ep.constant_value @state_forward_arrivals : index
    %forward_meeting = ep.constant_value @meeting_forward : index
    %world = ep.param_value @world : index
    %per_node = ep.param_value @gpu_per_node : index
    %nodes = arith.divui %world, %per_node : index
    %place = arith.remui %rank, %per_node : index
    %replaying = arith.cmpi ne, %replay, %c0 : index
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
    scf.for %node = %c0 to %nodes step %c1 {
      %node_first = arith.muli %node, %per_node : index
      %source = arith.addi %node_first, %place : index
      %off = func.call @off_node(%rank, %source) : (index, index) -> i1
      scf.if %off {
        %count = func.call @inbox_count(%counts, %source, %per_source, %rank, %w)
            : (!ep.ptr<i32>, index, index, index, !ep.window) -> index
        // Inbox blocks are per source node, as the forward route's rows.
        %forward_base = arith.muli %node, %per_source : index
        scf.for %i = %first to %count step %stride {
          %forwarded = arith.addi %forward_base, %i : index
          func.call @forward_row(%tokens_in, %weights_in, %scales_in, %indices_in, %origins_in, %forward_route,
                                 %forwarded, %replaying, %rank, %w)
              : (!ep.ptr<i32>, !ep.ptr<f32>, !ep.ptr<i8>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, index, i1,
                 index, !ep.window) -> ()
        }
      }
    }
    %last = func.call @arrive(%w, %rank, %epoch, %arrivals, %forward_meeting) : (!ep.window, index, i32, index, index) -> i1
    scf.if %last {
      func.call @poll_all(%w, %rank, %epoch, %forward_meeting) : (!ep.window, index, i32, index) -> ()
      func.call @publish_received(%w, %rank, %route, %replaying) : (!ep.window, index, !ep.ptr<i32>, i1) -> ()
    }
  }
}

// Whether route entry `entry` (rank * capacity + slot, or -1) counts:
// recorded, and on this node when `on_node_only`.
func.func private @staged_counts(%entry: i32, %on_node_only: i1, %rank: index) -> i1 {
  %c0_i32 = arith.constant 0 : i32
  %true = arith.constant true
  %recorded = arith.cmpi sge, %entry, %c0_i32 : i32
  %dest = func.call @entry_rank(%entry) : (i32) -> index
  %elsewhere = func.call @off_node(%rank, %dest) : (index, index) -> i1
  %excluded = arith.andi %on_node_only, %elsewhere : i1
  %kept = arith.xori %excluded, %true : i1
  %valid = arith.andi %recorded, %kept : i1
  return %valid : i1
}

// dst[0, hidden) (f32, a row start) = the f32 sum, in order, of the staged
// expert outputs a route row names: entries [row, row + topk), each rank *
// capacity + slot or -1; with `on_node_only`, entries naming another node
// (a rail peer's outbox slot) do not count.
func.func private @sum_staged(%dst: !ep.ptr<f32>, %entries: !ep.ptr<i32>, %row: index, %on_node_only: i1,
                              %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  ep.warp.sum_rows %dst[%c0], %hidden, sources(%topk) : !ep.ptr<f32> {
  ^bb0(%j: index):
    %box = arith.addi %row, %j : index
    %entry = ep.load %entries[%box] : !ep.ptr<i32>
    %slot = func.call @entry_slot(%entry) : (i32) -> index
    %dest = func.call @entry_rank(%entry) : (i32) -> index
    %valid = func.call @staged_counts(%entry, %on_node_only, %rank) : (i32, i1, index) -> i1
    %src_at = arith.muli %slot, %hidden : index
    %src = ep.peer_ptr %w[%dest] @combine_rows[%src_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
    ep.source %valid, %src : !ep.ptr<!ep.row_elem<"combine_elem">>
  }
  return
}

// The same for weights: dst[0, topk) (f32, a row start).
func.func private @sum_staged_weights(%dst: !ep.ptr<f32>, %entries: !ep.ptr<i32>, %row: index, %on_node_only: i1,
                                      %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %topk = ep.param_value @topk : index
  ep.warp.sum_rows %dst[%c0], %topk, sources(%topk) : !ep.ptr<f32> {
  ^bb0(%j: index):
    %box = arith.addi %row, %j : index
    %entry = ep.load %entries[%box] : !ep.ptr<i32>
    %slot = func.call @entry_slot(%entry) : (i32) -> index
    %dest = func.call @entry_rank(%entry) : (i32) -> index
    %valid = func.call @staged_counts(%entry, %on_node_only, %rank) : (i32, i1, index) -> i1
    %staged_at = arith.muli %slot, %topk : index
    %src = ep.peer_ptr %w[%dest] @combine_weights[%staged_at] : !ep.ptr<f32>
    ep.source %valid, %src : !ep.ptr<f32>
  }
  return
}

// Combine, first half: stage this rank's expert outputs (as gather does),
// meet the node, then write the node partials (f32): `partials` row
// [source_node * per_source + i] for inbox row i of each rail source, and
// `own_partials` row [token] for this rank's own tokens (their on-node
// contributions only). Weights likewise, when weighted.
ep.kernel @ep_internode_partials(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                                 %has_weights: index, %staged: index, %counts: !ep.ptr<i32>,
                                 %forward_route: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index,
                                 %partials: !ep.ptr<f32>, %partial_weights: !ep.ptr<f32>,
                                 %own_partials: !ep.ptr<f32>, %own_weights: !ep.ptr<f32>, %per_source: index,
                                 %rank: index, %w: !ep.window) warps_per_block(4)
    when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %c1 = arith.constant 1 : index
    %true = arith.constant true
    %false = arith.constant false
    %hidden = ep.param_value @hidden : index
    %topk = ep.param_value @topk : index
    %world = ep.param_value @world : index
    %per_node = ep.param_value @gpu_per_node : index
    %arrivals = ep.constant_value @state_combine_arrivals : index
    %combine_meeting = ep.constant_value @meeting_combine : index
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %total = arith.index_cast %total_i32 : i32 to index
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
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
    %last = func.call @arrive(%w, %rank, %epoch, %arrivals, %combine_meeting)
        : (!ep.window, index, i32, index, index) -> i1
    func.call @wait_for_all(%w, %rank, %epoch, %combine_meeting) : (!ep.window, index, i32, index) -> ()

    // Own tokens: their own node's contributions.
    scf.for %token = %first to %tokens step %stride {
      %row = arith.muli %token, %topk : index
      %at = arith.muli %token, %hidden : index
      %own_row = ep.ptr_add %own_partials, %at : !ep.ptr<f32>
      func.call @sum_staged(%own_row, %route, %row, %true, %rank, %w)
          : (!ep.ptr<f32>, !ep.ptr<i32>, index, i1, index, !ep.window) -> ()
      scf.if %weighted {
        %own_weights_row = ep.ptr_add %own_weights, %row : !ep.ptr<f32>
        func.call @sum_staged_weights(%own_weights_row, %route, %row, %true, %rank, %w)
            : (!ep.ptr<f32>, !ep.ptr<i32>, index, i1, index, !ep.window) -> ()
      }
    }
    // Forwarded rows: every contribution the forward route names is on this node.
    %nodes = arith.divui %world, %per_node : index
    %place = arith.remui %rank, %per_node : index
    scf.for %node = %c0 to %nodes step %c1 {
      %node_first = arith.muli %node, %per_node : index
      %source = arith.addi %node_first, %place : index
      %off = func.call @off_node(%rank, %source) : (index, index) -> i1
      scf.if %off {
        %count = func.call @inbox_count(%counts, %source, %per_source, %rank, %w)
            : (!ep.ptr<i32>, index, index, index, !ep.window) -> index
        %forward_base = arith.muli %node, %per_source : index
        scf.for %i = %first to %count step %stride {
          %forwarded = arith.addi %forward_base, %i : index
          %row = arith.muli %forwarded, %topk : index
          %at = arith.muli %forwarded, %hidden : index
          %partial_row = ep.ptr_add %partials, %at : !ep.ptr<f32>
          func.call @sum_staged(%partial_row, %forward_route, %row, %false, %rank, %w)
              : (!ep.ptr<f32>, !ep.ptr<i32>, index, i1, index, !ep.window) -> ()
          scf.if %weighted {
            %partial_weights_row = ep.ptr_add %partial_weights, %row : !ep.ptr<f32>
            func.call @sum_staged_weights(%partial_weights_row, %forward_route, %row, %false, %rank, %w)
                : (!ep.ptr<f32>, !ep.ptr<i32>, index, i1, index, !ep.window) -> ()
          }
        }
      }
    }
  }
}

// Source j of a token's final sum: j = 0 its own node's partial, j > 0
// route entry j - 1 when that names a rail peer on another node: the
// partial that peer sent back (returned rows are [node][per_source]), at
// the outbox slot the entry records.
// @node_partial_counts: whether source j counts (j = 0: when the token has
// a destination on this node); @node_partial_index: for j > 0, its row
// among the returned partials.
func.func private @route_entry(%j: index, %row: index, %route: !ep.ptr<i32>) -> i32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %is_own = arith.cmpi eq, %j, %c0 : index
  %back = arith.subi %j, %c1 : index
  %entry_j = arith.select %is_own, %c0, %back : index
  %box = arith.addi %row, %entry_j : index
  %entry = ep.load %route[%box] : !ep.ptr<i32>
  return %entry : i32
}
func.func private @node_partial_counts(%j: index, %row: index, %has_own: i1, %route: !ep.ptr<i32>,
                                       %rank: index) -> i1 {
  %c0 = arith.constant 0 : index
  %c0_i32 = arith.constant 0 : i32
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %is_own = arith.cmpi eq, %j, %c0 : index
  %entry = func.call @route_entry(%j, %row, %route) : (index, index, !ep.ptr<i32>) -> i32
  %recorded = arith.cmpi sge, %entry, %c0_i32 : i32
  %known = arith.select %recorded, %entry, %c0_i32 : i32
  %peer_i32 = arith.divsi %known, %capacity_i32 : i32
  %peer = arith.index_cast %peer_i32 : i32 to index
  %elsewhere = func.call @off_node(%rank, %peer) : (index, index) -> i1
  %remote = arith.andi %recorded, %elsewhere : i1
  %valid = arith.select %is_own, %has_own, %remote : i1
  return %valid : i1
}
func.func private @node_partial_index(%j: index, %row: index, %route: !ep.ptr<i32>, %per_source: index) -> index {
  %c0_i32 = arith.constant 0 : i32
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %per_node = ep.param_value @gpu_per_node : index
  %entry = func.call @route_entry(%j, %row, %route) : (index, index, !ep.ptr<i32>) -> i32
  %recorded = arith.cmpi sge, %entry, %c0_i32 : i32
  %known = arith.select %recorded, %entry, %c0_i32 : i32
  %peer_i32 = arith.divsi %known, %capacity_i32 : i32
  %slot_i32 = arith.remsi %known, %capacity_i32 : i32
  %peer = arith.index_cast %peer_i32 : i32 to index
  %slot = arith.index_cast %slot_i32 : i32 to index
  %peer_node = arith.divui %peer, %per_node : index
  %peer_rows = arith.muli %peer_node, %per_source : index
  %index = arith.addi %peer_rows, %slot : index
  return %index : index
}

// Combine, second half (after the partials came back): each of this rank's
// tokens is its node partials summed in f32 (its own node's first, then the
// other nodes' in route order), rounded once into `output`; the weights
// the same way into `out_weights`.
ep.kernel @ep_internode_sum(%output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                            %has_weights: index, %route: !ep.ptr<i32>, %tokens: index,
                            %own_partials: !ep.ptr<f32>, %own_weights: !ep.ptr<f32>,
                            %partials_in: !ep.ptr<f32>, %partial_weights_in: !ep.ptr<f32>, %per_source: index,
                            %rank: index, %w: !ep.window) warps_per_block(4)
    when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %c0_i32 = arith.constant 0 : i32
  %false = arith.constant false
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %hidden = ep.param_value @hidden : index
    %topk = ep.param_value @topk : index
    %capacity = ep.param_value @capacity : index
    %capacity_i32 = arith.index_cast %capacity : index to i32
    %sources = arith.addi %topk, %c1 : index
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
    %chunk_blocks = func.call @row_piece_blocks(%tokens) : (index) -> index
    %chunk = arith.muli %chunk_blocks, %c128 : index
    %chunks = func.call @row_pieces(%tokens, %chunk_blocks) : (index, index) -> index
    %items = arith.muli %tokens, %chunks : index
    scf.for %item = %first to %items step %stride {
      %token = arith.divui %item, %chunks : index
      %chunk_index = arith.remui %item, %chunks : index
      %c = arith.muli %chunk_index, %chunk : index
      %row = arith.muli %token, %topk : index
      %out_row = arith.muli %token, %hidden : index
      %out_at = arith.addi %out_row, %c : index
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %chunk : index
      %n = arith.select %short, %left, %chunk : index
      // Does the token have a destination on this node (an own-node partial)?
      %has_own = scf.for %j = %c0 to %topk step %c1 iter_args(%any = %false) -> (i1) {
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %recorded = arith.cmpi sge, %entry, %c0_i32 : i32
        %known = arith.select %recorded, %entry, %c0_i32 : i32
        %dest_i32 = arith.divsi %known, %capacity_i32 : i32
        %dest = arith.index_cast %dest_i32 : i32 to index
        %elsewhere = func.call @off_node(%rank, %dest) : (index, index) -> i1
        %here = arith.cmpi eq, %elsewhere, %false : i1
        %own = arith.andi %recorded, %here : i1
        %more = arith.ori %any, %own : i1
        scf.yield %more : i1
      }
      ep.warp.sum_rows %output[%out_at], %n, sources(%sources) : !ep.ptr<!ep.row_elem<"combine_elem">> {
      ^bb0(%j: index):
        %valid = func.call @node_partial_counts(%j, %row, %has_own, %route, %rank)
            : (index, index, i1, !ep.ptr<i32>, index) -> i1
        %returned = func.call @node_partial_index(%j, %row, %route, %per_source)
            : (index, index, !ep.ptr<i32>, index) -> index
        %returned_row = arith.muli %returned, %hidden : index
        %returned_at = arith.addi %returned_row, %c : index
        %returned_src = ep.ptr_add %partials_in, %returned_at : !ep.ptr<f32>
        %own_src = ep.ptr_add %own_partials, %out_at : !ep.ptr<f32>
        %is_own = arith.cmpi eq, %j, %c0 : index
        %src = arith.select %is_own, %own_src, %returned_src : !ep.ptr<f32>
        ep.source %valid, %src : !ep.ptr<f32>
      }
      %first_chunk = arith.cmpi eq, %chunk_index, %c0 : index
      %weights_here = arith.andi %weighted, %first_chunk : i1
      scf.if %weights_here {
        ep.warp.sum_rows %out_weights[%row], %topk, sources(%sources) : !ep.ptr<f32> {
        ^bb0(%j: index):
          %valid = func.call @node_partial_counts(%j, %row, %has_own, %route, %rank)
              : (index, index, i1, !ep.ptr<i32>, index) -> i1
          %returned = func.call @node_partial_index(%j, %row, %route, %per_source)
              : (index, index, !ep.ptr<i32>, index) -> index
          %returned_at = arith.muli %returned, %topk : index
          %returned_src = ep.ptr_add %partial_weights_in, %returned_at : !ep.ptr<f32>
          %own_src = ep.ptr_add %own_weights, %row : !ep.ptr<f32>
          %is_own = arith.cmpi eq, %j, %c0 : index
          %src = arith.select %is_own, %own_src, %returned_src : !ep.ptr<f32>
          ep.source %valid, %src : !ep.ptr<f32>
        }
      }
    }
  }
}
