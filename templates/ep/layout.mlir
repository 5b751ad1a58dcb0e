// ep/layout: what a dispatch of a batch's top-k would send, before it runs
// (DeepEP's get_dispatch_layout): the tokens each rank gets, the entries each
// expert gets, and which ranks each token goes to. Frameworks read these to
// size and plan their expert work; one launch where a framework layer would
// run several tensor ops.
ep.include "ep/common"
ep.include "ep/sync"

// Warp w of the grid takes entries (token * top-k + j) w, w + warps, ... for
// the counts, and tokens w, w + warps, ... for in_rank, reading a token's
// ids with no store between (they are in flight together). The top-k are
// int64 (frameworks' index type); -1, any negative, and experts past the
// last count nowhere (the dispatch refuses the latter with its error).
// Every entry counts for its expert, repeats too; a token counts once for
// each rank it goes to (at its first entry there); in_rank[t * world + r]
// is 1 or 0. Across nodes a token also counts once for each node it goes
// to (DeepEP's num_tokens_per_rdma_rank), into per_node when one is given.
// The counts gather with agent-scope atomics in one of @layout_counts' two
// buffers (per rank, then per expert), picked by @state_layouts' low bit,
// while the grid's last warp clears the other for the next call; the last
// block to finish copies them to per_rank and per_expert and hands the
// other buffer on. No clearing before the launch, no host wait: a graph can
// hold it.
// An id a layout counts: in [0, world * experts_per_rank).
func.func private @layout_expert(%expert: i64) -> i1 {
  %zero = arith.constant 0 : i64
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %experts = arith.muli %world, %epr : index
  %experts_i64 = arith.index_cast %experts : index to i64
  %not_negative = arith.cmpi sge, %expert, %zero : i64
  %in_range = arith.cmpi slt, %expert, %experts_i64 : i64
  %valid = arith.andi %not_negative, %in_range : i1
  return %valid : i1
}

ep.kernel @ep_dispatch_layout(%indices: !ep.ptr<i64>, %tokens: index, %per_rank: !ep.ptr<i32>,
                              %per_expert: !ep.ptr<i32>, %in_rank: !ep.ptr<i8>, %per_node: !ep.ptr<i32>,
                              %has_per_node: index, %rank: index, %w: !ep.window)
    warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %one = arith.constant 1 : i32
  %zero_i64 = arith.constant 0 : i64
  %one_i64 = arith.constant 1 : i64
  %false = arith.constant false
  %true = arith.constant true
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %ranks_per_node = ep.param_value @gpu_per_node : index
  %nodes = arith.divui %world, %ranks_per_node : index
  %across = func.call @across_nodes() : () -> i1
  %experts = arith.muli %world, %epr : index
  // A buffer's words: ranks, experts and nodes, in whole 16-byte lines (@layout_counts).
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %ranks_and_experts = arith.addi %world, %experts : index
  %used = arith.addi %ranks_and_experts, %nodes : index
  %up = arith.addi %used, %c3 : index
  %lines = arith.divui %up, %c4 : index
  %counts = arith.muli %lines, %c4 : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %layouts_word = ep.constant_value @state_layouts : index
  %layouts = ep.load %state[%layouts_word] : !ep.ptr<i32>
  %parity_i32 = arith.andi %layouts, %one : i32
  %parity = arith.index_cast %parity_i32 : i32 to index
  %counting_at = arith.muli %parity, %counts : index
  %clearing_at = arith.subi %counts, %counting_at : index
  %layout_counts = ep.peer_ptr %w[%rank] @layout_counts[%c0] : !ep.ptr<i32>
  %per_rank_counts = ep.ptr_add %layout_counts, %counting_at : !ep.ptr<i32>
  %per_expert_counts = ep.ptr_add %per_rank_counts, %world : !ep.ptr<i32>
  %per_node_counts = ep.ptr_add %per_expert_counts, %experts : !ep.ptr<i32>
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  %last_warp = arith.subi %warps, %c1 : index
  %clears = arith.cmpi eq, %first, %last_warp : index
  scf.if %clears {
    %zeros_at = arith.muli %counts, %c2 : index
    ep.warp.copy_row %layout_counts[%zeros_at], %layout_counts[%clearing_at], %counts : !ep.ptr<i32> -> !ep.ptr<i32>
  }
  %entries = arith.muli %tokens, %topk : index
  scf.for %at = %first to %entries step %warps {
    %j = arith.remui %at, %topk : index
    %row = arith.subi %at, %j : index
    %expert_i64 = ep.load %indices[%at] : !ep.ptr<i64>
    %valid = func.call @layout_expert(%expert_i64) : (i64) -> i1
    scf.if %valid {
      %expert = arith.index_cast %expert_i64 : i64 to index
      %before = ep.atomic_rmw add %per_expert_counts[%expert], %one scope(agent) order(relaxed) : !ep.ptr<i32>
      %owner = arith.divui %expert, %epr : index
      // The token's first entry on this rank counts it there.
      %seen = scf.for %i = %c0 to %j step %c1 iter_args(%found = %false) -> (i1) {
        %earlier_at = arith.addi %row, %i : index
        %earlier = ep.load %indices[%earlier_at] : !ep.ptr<i64>
        %earlier_valid = func.call @layout_expert(%earlier) : (i64) -> i1
        %earlier_index = arith.index_cast %earlier : i64 to index
        %earlier_owner = arith.divui %earlier_index, %epr : index
        %same = arith.cmpi eq, %earlier_owner, %owner : index
        %match = arith.andi %earlier_valid, %same : i1
        %any = arith.ori %found, %match : i1
        scf.yield %any : i1
      }
      %first_there = arith.xori %seen, %true : i1
      scf.if %first_there {
        %counted = ep.atomic_rmw add %per_rank_counts[%owner], %one scope(agent) order(relaxed) : !ep.ptr<i32>
      }
    }
  }
  scf.for %t = %first to %tokens step %warps {
    %row = arith.muli %t, %topk : index
    %mask = scf.for %j = %c0 to %topk step %c1 iter_args(%bits = %zero_i64) -> (i64) {
      %at = arith.addi %row, %j : index
      %expert_i64 = ep.load %indices[%at] : !ep.ptr<i64>
      %valid = func.call @layout_expert(%expert_i64) : (i64) -> i1
      %counted_id = arith.select %valid, %expert_i64, %zero_i64 : i64  // no shift by a stray id's owner
      %expert = arith.index_cast %counted_id : i64 to index
      %owner = arith.divui %expert, %epr : index
      %owner_i64 = arith.index_cast %owner : index to i64
      %bit = arith.shli %one_i64, %owner_i64 : i64
      %with = arith.ori %bits, %bit : i64
      %more = arith.select %valid, %with, %bits : i64
      scf.yield %more : i64
    }
    %cells = arith.muli %t, %world : index
    scf.for %r = %c0 to %world step %c1 {
      %r_i64 = arith.index_cast %r : index to i64
      %shifted = arith.shrui %mask, %r_i64 : i64
      %bit = arith.andi %shifted, %one_i64 : i64
      %flag = arith.trunci %bit : i64 to i8
      %cell = arith.addi %cells, %r : index
      ep.store %flag, %in_rank[%cell] : !ep.ptr<i8>
    }
    // Across nodes a node holds fewer than 64 ranks: its bits are a shifted run.
    scf.if %across {
      %per_node_i64 = arith.index_cast %ranks_per_node : index to i64
      %run = arith.shli %one_i64, %per_node_i64 : i64
      %node_bits = arith.subi %run, %one_i64 : i64
      scf.for %n = %c0 to %nodes step %c1 {
        %n_i64 = arith.index_cast %n : index to i64
        %first_rank = arith.muli %n_i64, %per_node_i64 : i64
        %shifted = arith.shrui %mask, %first_rank : i64
        %there = arith.andi %shifted, %node_bits : i64
        %goes = arith.cmpi ne, %there, %zero_i64 : i64
        scf.if %goes {
          %counted = ep.atomic_rmw add %per_node_counts[%n], %one scope(agent) order(relaxed) : !ep.ptr<i32>
        }
      }
    }
  }
  // The last block publishes the counts and hands the other buffer to the
  // next layout, which the stream runs after this one.
  ep.block_barrier
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  scf.if %lead {
    %arrivals = ep.constant_value @state_layout_arrivals : index
    %last = func.call @count_block_arrival(%w, %rank, %arrivals) : (!ep.window, index, index) -> i1
    scf.if %last {
      %next_layouts = arith.addi %layouts, %one : i32
      ep.store %next_layouts, %state[%layouts_word] : !ep.ptr<i32>
      ep.fence scope(agent) order(acquire)
      ep.warp.copy_row %per_rank_counts[%c0], %per_rank[%c0], %world : !ep.ptr<i32> -> !ep.ptr<i32>
      ep.warp.copy_row %per_expert_counts[%c0], %per_expert[%c0], %experts : !ep.ptr<i32> -> !ep.ptr<i32>
      %node_counts_asked = arith.cmpi ne, %has_per_node, %c0 : index
      scf.if %node_counts_asked {
        ep.warp.copy_row %per_node_counts[%c0], %per_node[%c0], %nodes : !ep.ptr<i32> -> !ep.ptr<i32>
      }
    }
  }
}
