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
// over every earlier chunk.
//
// Across nodes (internode v2_ll; docs/EP.md "Receive order"), off-node ranks'
// totals cannot be written through a window: ep_order_totals puts this rank's
// row of totals in the runtime's order rows ([world + 1] rows of world f32,
// source-major), the transport carries it to every off-node rank's copy
// before ep_order_slots, and ep_order_slots takes the node's totals from the
// order matrix and the other nodes' from those rows. A row for an off-node
// rank goes into this rank's outbox for it, at its place among this rank's
// rows there (the outbox holds only them), kept if its place on the
// destination is below capacity; the destination's ep_internode_ingest puts
// each source's rows at the row the route's route_source_first records.
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

// Across nodes: global warp 0 writes this rank's totals per destination
// (what ep_dispatch will send each rank) into its row of the order rows,
// which the runtime's transport then carries to every off-node rank.
ep.kernel @ep_order_totals(%tokens: index, %rank: index, %token_count: !ep.ptr<i32>, %count_on_device: index,
                           %rows: !ep.ptr<f32>, %w: !ep.window) warps_per_block(4)
    when(@source_order and @gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  %first = ep.global_warp_index : index
  %leads = arith.cmpi eq, %first, %c0 : index
  %works = arith.andi %answered, %leads : i1
  scf.if %works {
    %world = ep.param_value @world : index
    %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
    %chunks = func.call @order_chunks(%moved) : (index) -> index
    %stride = func.call @order_chunk_stride() : () -> index
    %counts = ep.peer_ptr %w[%rank] @order_chunk_counts[%c0] : !ep.ptr<f32>
    %mine = arith.muli %rank, %world : index
    scf.for %d = %c0 to %world step %c1 {
      %at = arith.muli %d, %stride : index
      %sent = ep.warp.reduce sum %counts[%at], %chunks : !ep.ptr<f32> -> f32
      %cell = arith.addi %mine, %d : index
      ep.store %sent, %rows[%cell] : !ep.ptr<f32>
    }
  }
}

// The tokens ranks below this one send rank `dest`: the node's from the
// order matrix, the earlier nodes' (across nodes) from the order rows'
// prefix row, which global warp 0 wrote before the order meeting.
func.func private @sent_before(%matrix: !ep.ptr<f32>, %rows: !ep.ptr<f32>, %dest: index, %rank: index) -> index {
  %world = ep.param_value @world : index
  %node_first = func.call @node_first(%rank) : (index) -> index
  %row = arith.muli %dest, %world : index
  %from = arith.addi %row, %node_first : index
  %node_ranks = arith.subi %rank, %node_first : index
  %on_node = func.call @sum_counts(%matrix, %from, %node_ranks) : (!ep.ptr<f32>, index, index) -> index
  %across = func.call @across_nodes() : () -> i1
  %sent = scf.if %across -> (index) {
    %prefix_row = arith.muli %world, %world : index
    %cell = arith.addi %prefix_row, %dest : index
    %earlier_f32 = ep.load %rows[%cell] : !ep.ptr<f32>
    %earlier_i32 = arith.fptosi %earlier_f32 : f32 to i32
    %earlier = arith.index_cast %earlier_i32 : i32 to index
    %both = arith.addi %on_node, %earlier : index
    scf.yield %both : index
  } else {
    scf.yield %on_node : index
  }
  return %sent : index
}

// Global warp 0 sends this rank's totals to the node (row rank of every node
// rank's matrix: order_matrix[d * world + rank] = tokens this rank sends to
// d); across nodes it also sums the rows of the earlier nodes' ranks into
// the order rows' prefix row; then it raises its flag of the order meeting.
// Every warp with chunks waits for the node's flags, then writes its chunks'
// route entries: rank * capacity + slot, or -1 past capacity (ep_dispatch's
// replay reports error 2 there), -1 past the token's ranks; an off-node
// rank's slot is the row's place in this rank's outbox for it. Warp 0 also
// records the received count in the route and, across nodes, the rows this
// rank's outboxes send and the row each off-node source's first token takes.
ep.kernel @ep_order_slots(%indices: !ep.ptr<i32>, %route: !ep.ptr<i32>, %tokens: index, %rank: index,
                          %token_count: !ep.ptr<i32>, %count_on_device: index, %rows: !ep.ptr<f32>,
                          %w: !ep.window) warps_per_block(4) when(@source_order) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  %zero_i32 = arith.constant 0 : i32
  %none = arith.constant -1 : i32
  %zero_i64 = arith.constant 0 : i64
  %zero_f32 = arith.constant 0.0 : f32
  %false = arith.constant false
  %epoch_word = ep.constant_value @state_epoch : index
  %meeting = ep.constant_value @meeting_order : index
  %topk = ep.param_value @topk : index
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %capacity = ep.param_value @capacity : index
  %max_tokens = ep.param_value @max_tokens : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %chunk = ep.constant_value @order_chunk_tokens : index
  %across = func.call @across_nodes() : () -> i1
  %node_first = func.call @node_first(%rank) : (index) -> index
  %node_end = func.call @node_end(%rank) : (index) -> index
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
    %prefix_row = arith.muli %world, %world : index
    %first = ep.global_warp_index : index
    %warps = ep.global_warp_count : index
    %publishes = arith.cmpi eq, %first, %c0 : index
    scf.if %publishes {
      scf.for %d = %c0 to %world step %c1 {
        %at = arith.muli %d, %stride : index
        %sent = ep.warp.reduce sum %counts[%at], %chunks : !ep.ptr<f32> -> f32
        %row = arith.muli %d, %world : index
        %cell = arith.addi %row, %rank : index
        scf.for %peer = %node_first to %node_end step %c1 {
          %theirs = ep.peer_ptr %w[%peer] @order_matrix[%c0] : !ep.ptr<f32>
          ep.store %sent, %theirs[%cell] : !ep.ptr<f32>
        }
      }
      // The earlier nodes' ranks' rows, summed: what they send each rank.
      scf.if %across {
        scf.for %d = %c0 to %world step %c1 {
          %cell = arith.addi %prefix_row, %d : index
          ep.store %zero_f32, %rows[%cell] : !ep.ptr<f32>
        }
        ep.warp_barrier
        scf.for %source = %c0 to %node_first step %c1 {
          %source_row = arith.muli %source, %world : index
          ep.warp.accumulate %rows[%source_row], %rows[%prefix_row], %world : !ep.ptr<f32> -> !ep.ptr<f32>
        }
        ep.warp_barrier
      }
      // One release fence for all the flags (as @arrive_led_by).
      ep.fence scope(system) order(release)
      %base = arith.muli %meeting, %world : index
      %slot = arith.addi %base, %rank : index
      scf.for %peer = %node_first to %node_end step %c1 {
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
      %received_at = ep.buffer_offset @route_received : index
      %received = scf.if %across -> (index) {
        // Source by source: each off-node source's first row is where the
        // rows of every lower source end.
        %first_at = ep.buffer_offset @route_source_first : index
        %sent_at = ep.buffer_offset @route_sent : index
        %total = scf.for %source = %c0 to %world step %c1 iter_args(%before = %c0) -> (index) {
          %off = func.call @off_node(%rank, %source) : (index, index) -> i1
          %from_source = scf.if %off -> (f32) {
            %before_i32 = arith.index_cast %before : index to i32
            %word = arith.addi %first_at, %source : index
            ep.store %before_i32, %route[%word] : !ep.ptr<i32>
            %source_row = arith.muli %source, %world : index
            %cell = arith.addi %source_row, %rank : index
            %their_count = ep.load %rows[%cell] : !ep.ptr<f32>
            scf.yield %their_count : f32
          } else {
            %cell = arith.addi %mine, %source : index
            %node_count = ep.load %matrix[%cell] : !ep.ptr<f32>
            scf.yield %node_count : f32
          }
          %count_i32 = arith.fptosi %from_source : f32 to i32
          %count = arith.index_cast %count_i32 : i32 to index
          %after = arith.addi %before, %count : index
          scf.yield %after : index
        }
        // What this rank's outbox for each off-node rank sends: its rows
        // there whose places on that rank are below capacity (a prefix of
        // them, in source order). 0 for the node's ranks.
        scf.for %dest = %c0 to %world step %c1 {
          %off = func.call @off_node(%rank, %dest) : (index, index) -> i1
          %kept = scf.if %off -> (i32) {
            %lower = func.call @sent_before(%matrix, %rows, %dest, %rank)
                : (!ep.ptr<f32>, !ep.ptr<f32>, index, index) -> index
            %cell = arith.addi %mine, %dest : index
            %ours_f32 = ep.load %rows[%cell] : !ep.ptr<f32>
            %ours = arith.fptosi %ours_f32 : f32 to i32
            %lower_i32 = arith.index_cast %lower : index to i32
            %room = arith.subi %capacity_i32, %lower_i32 : i32
            %no_room = arith.cmpi slt, %room, %zero_i32 : i32
            %left = arith.select %no_room, %zero_i32, %room : i32
            %short = arith.cmpi slt, %left, %ours : i32
            %fit = arith.select %short, %left, %ours : i32
            scf.yield %fit : i32
          } else {
            scf.yield %zero_i32 : i32
          }
          %word = arith.addi %sent_at, %dest : index
          ep.store %kept, %route[%word] : !ep.ptr<i32>
        }
        scf.yield %total : index
      } else {
        %all = func.call @sum_counts(%matrix, %mine, %world) : (!ep.ptr<f32>, index, index) -> index
        scf.yield %all : index
      }
      %received_i32 = arith.index_cast %received : index to i32
      ep.store %received_i32, %route[%received_at] : !ep.ptr<i32>
    }
    %offsets = ep.peer_ptr %w[%rank] @order_offsets[%c0] : !ep.ptr<i32>
    // Across nodes: where each chunk's starts on the off-node ranks are moved
    // by (the tokens lower ranks send there) to become outbox places.
    %shift_base = arith.muli %world, %max_tokens : index
    %entries_at = ep.buffer_offset @route_entries : index
    scf.for %c = %first to %chunks step %warps {
      // The chunk's first slot on each rank d: rows of source ranks below
      // this one, then this rank's earlier chunks'.
      %chunk_at = arith.muli %c, %world : index
      scf.for %d = %c0 to %world step %c1 {
        %lower_ranks = func.call @sent_before(%matrix, %rows, %d, %rank)
            : (!ep.ptr<f32>, !ep.ptr<f32>, index, index) -> index
        %at = arith.muli %d, %stride : index
        %earlier = func.call @sum_counts(%counts, %at, %c) : (!ep.ptr<f32>, index, index) -> index
        %start = arith.addi %lower_ranks, %earlier : index
        %start_i32 = arith.index_cast %start : index to i32
        %cell = arith.addi %chunk_at, %d : index
        ep.store %start_i32, %offsets[%cell] : !ep.ptr<i32>
        %off = func.call @off_node(%rank, %d) : (index, index) -> i1
        scf.if %off {
          %lower_i32 = arith.index_cast %lower_ranks : index to i32
          %shift_cell = arith.addi %shift_base, %cell : index
          ep.store %lower_i32, %offsets[%shift_cell] : !ep.ptr<i32>
        }
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
            %dest_off = func.call @off_node(%rank, %dest) : (index, index) -> i1
            %shift = scf.if %dest_off -> (i32) {
              %shift_cell = arith.addi %shift_base, %cell : index
              %lower = ep.load %offsets[%shift_cell] : !ep.ptr<i32>
              scf.yield %lower : i32
            } else {
              scf.yield %zero_i32 : i32
            }
            %place = arith.subi %slot, %shift : i32
            %dest_i32 = arith.index_cast %dest : index to i32
            %dest_base = arith.muli %dest_i32, %capacity_i32 : i32
            %taken = arith.addi %dest_base, %place : i32
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
