// ep/sync: how the ranks of an op meet, and the routing helpers dispatch and
// std-MoE share. Cross-rank counters reset themselves: the last block of a
// rank to arrive clears the count, and "everyone arrived" is an epoch number
// in the signal flags (flag >= epoch), so dispatch -> combine replays with no
// host work. Every warp of a block must call arrive and wait_for_all (they
// hold the block's barrier).
ep.include "ep/common"

// A meeting is among the ranks of one node, the ranks whose windows map each
// other: [node_first, node_end). Intranode (gpu_per_node = world) that is
// every rank; ranks of other nodes are reached through the internode
// transfer (ep/internode), never through a flag.
func.func private @node_first(%rank: index) -> index {
  %per_node = ep.param_value @gpu_per_node : index
  %node = arith.divui %rank, %per_node : index
  %first = arith.muli %node, %per_node : index
  return %first : index
}
func.func private @node_end(%rank: index) -> index {
  %per_node = ep.param_value @gpu_per_node : index
  %first = func.call @node_first(%rank) : (index) -> index
  %end = arith.addi %first, %per_node : index
  return %end : index
}
// Is the op's group spread over several nodes?
func.func private @across_nodes() -> i1 {
  %per_node = ep.param_value @gpu_per_node : index
  %world = ep.param_value @world : index
  %across = arith.cmpi ult, %per_node, %world : index
  return %across : i1
}

// Is `peer` on another node than `rank`?
func.func private @off_node(%rank: index, %peer: index) -> i1 {
  %first = func.call @node_first(%rank) : (index) -> index
  %end = func.call @node_end(%rank) : (index) -> index
  %before = arith.cmpi ult, %peer, %first : index
  %after = arith.cmpi uge, %peer, %end : index
  %off = arith.ori %before, %after : i1
  return %off : i1
}

// A block's arrival in this rank's count state[counter], on the block's
// lead warp once the block barrier put all its warps' writes before it: one
// acq_rel atomic at agent scope per block (not per warp: every warp of a
// grid on one word is a queue of a thousand atomics at sm90's small-call
// geometry). The last block resets the count for the next call and gets
// true, having acquired every block's writes.
func.func private @count_block_arrival(%w: !ep.window, %rank: index, %counter: index) -> i1 {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %one = arith.constant 1 : i32
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %before = ep.atomic_rmw add %state[%counter], %one scope(agent) order(acq_rel) : !ep.ptr<i32>
  %blocks = ep.block_count : index
  %blocks_i32 = arith.index_cast %blocks : index to i32
  %last_count = arith.subi %blocks_i32, %one : i32
  %is_last = arith.cmpi eq, %before, %last_count : i32
  scf.if %is_last {
    ep.atomic_store %zero, %state[%counter] scope(agent) order(relaxed) : !ep.ptr<i32>
  }
  return %is_last : i1
}

// The calling block's arrival at a cross-rank meeting, once all its warps
// are there (@count_block_arrival in state[counter]); the last block, after
// one system-scope release fence, raises this rank's flag
// (signals[meeting * world + rank] = epoch) on every rank. Release is
// cumulative: that fence orders every block's writes the last block's atomic
// acquired, so only one block per meeting pays for a system-scope fence (it
// was every block's costliest step: ncu's stall samples of a one-token
// dispatch sat on its ERRBAR). Returns true on that one warp. The block's
// warp `leader` counts it and raises the flags: a kernel whose first warps
// have work after the arrival keeps the atomic and the fence off their path.
func.func private @arrive_led_by(%w: !ep.window, %rank: index, %epoch: i32, %counter: index, %meeting: index,
                                 %leader: index) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %false = arith.constant false
  %world = ep.param_value @world : index
  ep.block_barrier
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %leader : index
  %last = scf.if %lead -> (i1) {
    %is_last = func.call @count_block_arrival(%w, %rank, %counter) : (!ep.window, index, index) -> i1
    scf.if %is_last {
      %base = arith.muli %meeting, %world : index
      %slot = arith.addi %base, %rank : index
      // One release fence for all the flags (a fence, then relaxed stores, is
      // a release of each), not a release store per peer.
      ep.fence scope(system) order(release)
      %node_first = func.call @node_first(%rank) : (index) -> index
      %node_end = func.call @node_end(%rank) : (index) -> index
      scf.for %peer = %node_first to %node_end step %c1 {
        %flags = ep.peer_ptr %w[%peer] @signals[%c0] : !ep.ptr<i32>
        ep.atomic_store %epoch, %flags[%slot] scope(system) order(relaxed) : !ep.ptr<i32>
      }
    }
    scf.yield %is_last : i1
  } else {
    scf.yield %false : i1
  }
  return %last : i1
}

// @arrive_led_by with the block's warp 0 counting.
func.func private @arrive(%w: !ep.window, %rank: index, %epoch: i32, %counter: index, %meeting: index) -> i1 {
  %c0 = arith.constant 0 : index
  %last = func.call @arrive_led_by(%w, %rank, %epoch, %counter, %meeting, %c0)
      : (!ep.window, index, i32, index, index, index) -> i1
  return %last : i1
}

// Polls, on the calling warp alone, until every rank of this rank's node has
// raised its flag of `meeting` to `epoch`. A rank that does not come within the op's peer
// timeout (state_peer_timeout_ms) sets error_peer_timeout instead of hanging;
// once any wait has failed, the others give up at once.
func.func private @poll_all(%w: !ep.window, %rank: index, %epoch: i32, %meeting: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %error_word = ep.constant_value @state_error : index
  %timeout = ep.constant_value @error_peer_timeout : i32
  %limit_word = ep.constant_value @state_peer_timeout_ms : index
  %world = ep.param_value @world : index
  %base = arith.muli %meeting, %world : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %flags = ep.peer_ptr %w[%rank] @signals[%base] : !ep.ptr<i32>
  %limit = ep.load %state[%limit_word] : !ep.ptr<i32>
  %node_first = func.call @node_first(%rank) : (index) -> index
  %node_end = func.call @node_end(%rank) : (index) -> index
  scf.for %peer = %node_first to %node_end step %c1 {
    %ok = ep.wait_until %flags[%peer] ge %epoch scope(system) timeout_ms(%limit)
        error(%state[%error_word], %timeout) : !ep.ptr<i32>, !ep.ptr<i32>
  }
  return
}

// False once a dispatch of this op has given up on a peer (state_stopped,
// written by its last block after every block of it has started): every
// kernel queued behind the failed call then does nothing (no sends into
// peers' windows, no meetings) until reset(). The word changes only between
// kernels, so every warp of a launch decides alike (a block barrier never
// sees part of its block). A combine that times out stops the calls after
// the next dispatch, whose waits give up at once. Data errors (capacity, a
// bad expert) do not stop later calls: their meetings still complete.
func.func private @peers_answered(%w: !ep.window, %rank: index) -> i1 {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %stopped_word = ep.constant_value @state_stopped : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %stopped = ep.atomic_load %state[%stopped_word] scope(system) order(relaxed) : !ep.ptr<i32>
  %answered = arith.cmpi eq, %stopped, %zero : i32
  return %answered : i1
}

// After a dispatch's meeting: a peer timeout stops every later kernel.
func.func private @stop_after_timeout(%w: !ep.window, %rank: index) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i32
  %error_word = ep.constant_value @state_error : index
  %stopped_word = ep.constant_value @state_stopped : index
  %timed_out = ep.constant_value @error_peer_timeout : i32
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %error = ep.atomic_load %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
  %stop = arith.cmpi eq, %error, %timed_out : i32
  scf.if %stop {
    ep.atomic_store %one, %state[%stopped_word] scope(system) order(relaxed) : !ep.ptr<i32>
  }
  return
}

// poll_all for a whole block: one warp polls, then the block's barrier lets
// the others on.
func.func private @wait_for_all(%w: !ep.window, %rank: index, %epoch: i32, %meeting: index) {
  %c0 = arith.constant 0 : index
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  scf.if %lead {
    func.call @poll_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
  }
  ep.block_barrier
  return
}

// Does indices[row .. row + j) name expert `indices[row + j]` already? (A
// rank seen earlier is a mask question: @ranks_before.)
func.func private @expert_repeats_earlier(%indices: !ep.ptr<i32>, %row: index, %j: index) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %false = arith.constant false
  %at = arith.addi %row, %j : index
  %expert = ep.load %indices[%at] : !ep.ptr<i32>
  %seen = scf.for %i = %c0 to %j step %c1 iter_args(%found = %false) -> (i1) {
    %earlier_at = arith.addi %row, %i : index
    %earlier = ep.load %indices[%earlier_at] : !ep.ptr<i32>
    %match = arith.cmpi eq, %earlier, %expert : i32
    %any = arith.ori %found, %match : i1
    scf.yield %any : i1
  }
  return %seen : i1
}

// Is `expert` outside [0, world * experts_per_rank)?
func.func private @invalid_expert(%expert_i32: i32) -> i1 {
  %zero = arith.constant 0 : i32
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %experts = arith.muli %world, %epr : index
  %expert = arith.index_cast %expert_i32 : i32 to index
  %negative = arith.cmpi slt, %expert_i32, %zero : i32
  %beyond = arith.cmpi uge, %expert, %experts : index
  %invalid = arith.ori %negative, %beyond : i1
  return %invalid : i1
}

// Where a token for rank `dest` goes from `rank`. Forwarding (internode v2,
// docs/EP.md): a rank of another node is reached through its node's rail
// peer, the rank there with this rank's place in its node, which forwards
// the token inside that node; so a token crosses to each node once.
// Otherwise (intranode, v2_ll): `dest` itself.
func.func private @send_target(%rank: index, %dest: index, %forwarding: i1) -> index {
  %per_node = ep.param_value @gpu_per_node : index
  %off = func.call @off_node(%rank, %dest) : (index, index) -> i1
  %via_rail = arith.andi %forwarding, %off : i1
  %node = arith.divui %dest, %per_node : index
  %node_first = arith.muli %node, %per_node : index
  %place = arith.remui %rank, %per_node : index
  %rail_peer = arith.addi %node_first, %place : index
  %target = arith.select %via_rail, %rail_peer, %dest : index
  return %target : index
}

// The bit of the send target (@send_target) of the rank expert `expert_i32`
// lives on (world <= 64: the config bounds it by the wave size), or 0 for a
// masked or invalid expert.
func.func private @rank_bit_of(%expert_i32: i32, %rank: index, %forwarding: i1) -> i64 {
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %epr = ep.param_value @experts_per_rank : index
  %invalid = func.call @invalid_expert(%expert_i32) : (i32) -> i1
  %expert = arith.index_cast %expert_i32 : i32 to index
  %dest = arith.divui %expert, %epr : index
  %target = func.call @send_target(%rank, %dest, %forwarding) : (index, index, i1) -> index
  %target_i64 = arith.index_cast %target : index to i64
  %shifted = arith.shli %one, %target_i64 : i64
  %bit = arith.select %invalid, %zero, %shifted : i64
  return %bit : i64
}

// @rank_bit_of of the expert `indices[at]`.
func.func private @rank_bit(%indices: !ep.ptr<i32>, %at: index, %rank: index, %forwarding: i1) -> i64 {
  %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
  %bit = func.call @rank_bit_of(%expert_i32, %rank, %forwarding) : (i32, index, i1) -> i64
  return %bit : i64
}

// The send targets indices[row .. row + j) name (valid experts only), one bit each.
func.func private @ranks_before(%indices: !ep.ptr<i32>, %row: index, %j: index, %rank: index,
                                %forwarding: i1) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %none = arith.constant 0 : i64
  %mask = scf.for %i = %c0 to %j step %c1 iter_args(%seen = %none) -> (i64) {
    %at = arith.addi %row, %i : index
    %bit = func.call @rank_bit(%indices, %at, %rank, %forwarding) : (!ep.ptr<i32>, index, index, i1) -> i64
    %more = arith.ori %seen, %bit : i64
    scf.yield %more : i64
  }
  return %mask : i64
}

// The number of ranks in a mask of ranks.
func.func private @rank_count(%mask: i64) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i64
  %world = ep.param_value @world : index
  %count = scf.for %r = %c0 to %world step %c1 iter_args(%n = %c0) -> (index) {
    %r_i64 = arith.index_cast %r : index to i64
    %shifted = arith.shrui %mask, %r_i64 : i64
    %bit = arith.andi %shifted, %one : i64
    %bit_index = arith.index_cast %bit : i64 to index
    %more = arith.addi %n, %bit_index : index
    scf.yield %more : index
  }
  return %count : index
}

// How many distinct send targets indices[row .. row + j) name (valid
// experts only): the ordinal of the destination entry j would open. One pass
// with a mask of the ranks seen (was a pass per entry: O(top-k^2) loads).
func.func private @destinations_before(%indices: !ep.ptr<i32>, %row: index, %j: index, %rank: index,
                                       %forwarding: i1) -> index {
  %mask = func.call @ranks_before(%indices, %row, %j, %rank, %forwarding)
      : (!ep.ptr<i32>, index, index, index, i1) -> i64
  %count = func.call @rank_count(%mask) : (i64) -> index
  return %count : index
}

// The ordinal of send target `dest` among the token's in order of first
// appearance (where dispatch records its slot in the route); the token's
// target count if it does not go to `dest`.
func.func private @rank_ordinal(%indices: !ep.ptr<i32>, %row: index, %dest: index, %rank: index,
                                %forwarding: i1) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %none = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %false = arith.constant false
  %topk = ep.param_value @topk : index
  %dest_i64 = arith.index_cast %dest : index to i64
  %dest_bit = arith.shli %one, %dest_i64 : i64
  %ordinal:3 = scf.for %j = %c0 to %topk step %c1 iter_args(%seen = %none, %n = %c0, %found = %false)
      -> (i64, index, i1) {
    %at = arith.addi %row, %j : index
    %bit = func.call @rank_bit(%indices, %at, %rank, %forwarding) : (!ep.ptr<i32>, index, index, i1) -> i64
    %known = arith.andi %seen, %bit : i64
    %is_new = arith.cmpi eq, %known, %none : i64
    %is_bit = arith.cmpi ne, %bit, %none : i64
    %fresh = arith.andi %is_new, %is_bit : i1
    %is_dest = arith.cmpi eq, %bit, %dest_bit : i64
    %stops = arith.ori %found, %is_dest : i1
    %n_more = arith.addi %n, %c1 : index
    %counts = arith.cmpi eq, %stops, %false : i1
    %counts_fresh = arith.andi %counts, %fresh : i1
    %n_next = arith.select %counts_fresh, %n_more, %n : index
    %seen_next = arith.ori %seen, %bit : i64
    scf.yield %seen_next, %n_next, %stops : i64, index, i1
  }
  return %ordinal#1 : index
}
