// ep/order: a dispatch whose rows arrive in source order (receive_order =
// source; DeepEP's normal-mode order): on every rank, rank 0's rows first,
// then rank 1's, ..., each rank's in its token order, however the ranks'
// timing falls. Two kernels run before ep_dispatch and fill the route with
// those slots; ep_dispatch then sends as a replay does (no slot counter, so
// no atomic decides a row's place):
//   ep_order_count  per chunk of @order_chunk_tokens tokens, how many of
//                   them go to each rank (@order_chunk_counts, rank-major);
//   ep_order_slots  every rank's totals to every rank (@order_matrix, one
//                   meeting), then each token's slot on each of its ranks:
//                   the rows lower source ranks send there, plus this rank's
//                   rows of earlier chunks, plus its place in its chunk.
// Counts are kept as f32 (exact below 2^24, and capacity is far below) so a
// prefix over chunks is one lane-parallel ep.warp.reduce instead of a walk
// over every earlier chunk. One node only (the config refuses internode).
ep.include "ep/common"
ep.include "ep/buffers"
ep.include "ep/sync"

// Chunks of a call of `moved` tokens, and the stride of one rank's chunk
// counts (chunks of the op's largest call).
func.func private @order_chunks(%moved: index) -> index {
  %chunk = ep.constant_value @order_chunk_tokens : index
  %chunks = func.call @ceil_div(%moved, %chunk) : (index, index) -> index
  return %chunks : index
}
func.func private @order_chunk_stride() -> index {
  %max_tokens = ep.param_value @max_tokens : index
  %stride = func.call @order_chunks(%max_tokens) : (index) -> index
  return %stride : index
}

// Each warp counts its chunks (chunk c: tokens [c * chunk, (c + 1) * chunk)
// of the call): order_chunk_counts[d * stride + c] = the chunk's tokens that
// go to rank d (a token once per rank, masked and invalid experts nowhere,
// as ep_dispatch sends them).
ep.kernel @ep_order_count(%indices: !ep.ptr<i32>, %tokens: index, %rank: index, %token_count: !ep.ptr<i32>,
                          %count_on_device: index, %w: !ep.window) warps_per_block(4) when(@source_order) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero_i64 = arith.constant 0 : i64
  %one_i64 = arith.constant 1 : i64
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %false = arith.constant false
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %chunk = ep.constant_value @order_chunk_tokens : index
  %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
  %chunks = func.call @order_chunks(%moved) : (index) -> index
  %stride = func.call @order_chunk_stride() : () -> index
  %counts = ep.peer_ptr %w[%rank] @order_chunk_counts[%c0] : !ep.ptr<f32>
  %first = ep.global_warp_index : index
  %warps = ep.global_warp_count : index
  scf.for %c = %first to %chunks step %warps {
    scf.for %d = %c0 to %world step %c1 {
      %at = arith.muli %d, %stride : index
      %cell = arith.addi %at, %c : index
      ep.store %zero, %counts[%cell] : !ep.ptr<f32>
    }
    %begin = arith.muli %c, %chunk : index
    %after = arith.addi %begin, %chunk : index
    %past = arith.cmpi ugt, %after, %moved : index
    %end = arith.select %past, %moved, %after : index
    scf.for %t = %begin to %end step %c1 {
      %row = arith.muli %t, %topk : index
      %mask = func.call @ranks_before(%indices, %row, %topk, %rank, %false)
          : (!ep.ptr<i32>, index, index, index, i1) -> i64
      scf.for %d = %c0 to %world step %c1 {
        %d_i64 = arith.index_cast %d : index to i64
        %shifted = arith.shrui %mask, %d_i64 : i64
        %bit = arith.andi %shifted, %one_i64 : i64
        %goes = arith.cmpi ne, %bit, %zero_i64 : i64
        scf.if %goes {
          %at = arith.muli %d, %stride : index
          %cell = arith.addi %at, %c : index
          %before = ep.load %counts[%cell] : !ep.ptr<f32>
          %more = arith.addf %before, %one : f32
          ep.store %more, %counts[%cell] : !ep.ptr<f32>
        }
      }
    }
  }
}

// The sum of `count` f32 counts from `at`, as an index (exact: whole numbers
// below 2^24).
func.func private @sum_counts(%counts: !ep.ptr<f32>, %at: index, %count: index) -> index {
  %sum = ep.warp.reduce sum %counts[%at], %count : !ep.ptr<f32> -> f32
  %whole = arith.fptosi %sum : f32 to i32
  %result = arith.index_cast %whole : i32 to index
  return %result : index
}

// Global warp 0 sends this rank's totals (row rank of every rank's matrix:
// order_matrix[d * world + rank] = tokens this rank sends to d), then raises
// its flag of the order meeting; every warp with chunks waits for every
// rank's, then writes its chunks' route entries: rank * capacity + slot, or
// -1 past capacity (ep_dispatch's replay reports error 2 there), -1 past the
// token's ranks. Warp 0 also records the received count in the route.
ep.kernel @ep_order_slots(%indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index, %rank: index,
                          %token_count: !ep.ptr<i32>, %count_on_device: index, %w: !ep.window)
    warps_per_block(4) when(@source_order) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %none = arith.constant -1 : i32
  %zero_i64 = arith.constant 0 : i64
  %false = arith.constant false
  %epoch_word = ep.constant_value @state_epoch : index
  %meeting = ep.constant_value @meeting_order : index
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %chunk = ep.constant_value @order_chunk_tokens : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  // The epoch ep_dispatch will complete (it stores it; this kernel does not).
  %previous = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %epoch = arith.addi %previous, %one : i32
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
    %chunks = func.call @order_chunks(%moved) : (index) -> index
    %stride = func.call @order_chunk_stride() : () -> index
    %counts = ep.peer_ptr %w[%rank] @order_chunk_counts[%c0] : !ep.ptr<f32>
    %matrix = ep.peer_ptr %w[%rank] @order_matrix[%c0] : !ep.ptr<f32>
    %first = ep.global_warp_index : index
    %warps = ep.global_warp_count : index
    %publishes = arith.cmpi eq, %first, %c0 : index
    scf.if %publishes {
      scf.for %d = %c0 to %world step %c1 {
        %at = arith.muli %d, %stride : index
        %sent = ep.warp.reduce sum %counts[%at], %chunks : !ep.ptr<f32> -> f32
        %row = arith.muli %d, %world : index
        %cell = arith.addi %row, %rank : index
        scf.for %peer = %c0 to %world step %c1 {
          %theirs = ep.peer_ptr %w[%peer] @order_matrix[%c0] : !ep.ptr<f32>
          ep.store %sent, %theirs[%cell] : !ep.ptr<f32>
        }
      }
      // One release fence for all the flags (as @arrive_led_by).
      ep.fence scope(system) order(release)
      %base = arith.muli %meeting, %world : index
      %slot = arith.addi %base, %rank : index
      scf.for %peer = %c0 to %world step %c1 {
        %flags = ep.peer_ptr %w[%peer] @signals[%c0] : !ep.ptr<i32>
        ep.atomic_store %epoch, %flags[%slot] scope(system) order(relaxed) : !ep.ptr<i32>
      }
    }
    %has_chunks = arith.cmpi ult, %first, %chunks : index
    %waits = arith.ori %has_chunks, %publishes : i1
    scf.if %waits {
      func.call @poll_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
    }
    scf.if %publishes {
      %mine = arith.muli %rank, %world : index
      %received = func.call @sum_counts(%matrix, %mine, %world) : (!ep.ptr<f32>, index, index) -> index
      %received_i32 = arith.index_cast %received : index to i32
      %received_at = ep.buffer_offset @route_received : index
      ep.store %received_i32, %route[%received_at] : !ep.ptr<i32>
    }
    %offsets = ep.peer_ptr %w[%rank] @order_offsets[%c0] : !ep.ptr<i32>
    %entries_at = ep.buffer_offset @route_entries : index
    scf.for %c = %first to %chunks step %warps {
      // The chunk's first slot on each rank d: rows of source ranks below
      // this one, then this rank's earlier chunks'.
      %chunk_at = arith.muli %c, %world : index
      scf.for %d = %c0 to %world step %c1 {
        %row = arith.muli %d, %world : index
        %lower_ranks = func.call @sum_counts(%matrix, %row, %rank) : (!ep.ptr<f32>, index, index) -> index
        %at = arith.muli %d, %stride : index
        %earlier = func.call @sum_counts(%counts, %at, %c) : (!ep.ptr<f32>, index, index) -> index
        %start = arith.addi %lower_ranks, %earlier : index
        %start_i32 = arith.index_cast %start : index to i32
        %cell = arith.addi %chunk_at, %d : index
        ep.store %start_i32, %offsets[%cell] : !ep.ptr<i32>
      }
      %begin = arith.muli %c, %chunk : index
      %after = arith.addi %begin, %chunk : index
      %past = arith.cmpi ugt, %after, %moved : index
      %end = arith.select %past, %moved, %after : index
      scf.for %t = %begin to %end step %c1 {
        %row = arith.muli %t, %topk : index
        %route_row = arith.addi %entries_at, %row : index
        // The token's ranks in order of first appearance, as ep_dispatch numbers them.
        %walk:2 = scf.for %j = %c0 to %topk step %c1 iter_args(%seen = %zero_i64, %n = %c0) -> (i64, index) {
          %at = arith.addi %row, %j : index
          %bit = func.call @rank_bit(%indices, %at, %rank, %false) : (!ep.ptr<i32>, index, index, i1) -> i64
          %known = arith.andi %seen, %bit : i64
          %is_new = arith.cmpi eq, %known, %zero_i64 : i64
          %is_bit = arith.cmpi ne, %bit, %zero_i64 : i64
          %fresh = arith.andi %is_new, %is_bit : i1
          scf.if %fresh {
            %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
            %expert = arith.index_cast %expert_i32 : i32 to index
            %dest = arith.divui %expert, %epr : index
            %cell = arith.addi %chunk_at, %dest : index
            %slot = ep.load %offsets[%cell] : !ep.ptr<i32>
            %next = arith.addi %slot, %one : i32
            ep.store %next, %offsets[%cell] : !ep.ptr<i32>
            %fits = arith.cmpi slt, %slot, %capacity_i32 : i32
            %dest_i32 = arith.index_cast %dest : index to i32
            %dest_base = arith.muli %dest_i32, %capacity_i32 : i32
            %taken = arith.addi %dest_base, %slot : i32
            %entry = arith.select %fits, %taken, %none : i32
            %entry_at = arith.addi %route_row, %n : index
            ep.store %entry, %route[%entry_at] : !ep.ptr<i32>
          }
          %n_more = arith.addi %n, %c1 : index
          %n_next = arith.select %fresh, %n_more, %n : index
          %seen_next = arith.ori %seen, %bit : i64
          scf.yield %seen_next, %n_next : i64, index
        }
        scf.for %tail = %walk#1 to %topk step %c1 {
          %tail_at = arith.addi %route_row, %tail : index
          ep.store %none, %route[%tail_at] : !ep.ptr<i32>
        }
      }
    }
  }
}
