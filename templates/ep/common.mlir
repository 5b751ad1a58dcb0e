// ep/common: what every kernel of ep_dispatch_combine shares: the parameters
// of a specialization, the named constants the kernels and the runtime agree
// on, and the symmetric window's regions. The interface record carries all of
// it to the runtime, which lays the window out from it (docs/EP.md).

ep.param @token_words : index {min = 1 : i64}       // dispatched row in 4-byte words
ep.param @scale_bytes : index                       // opaque per-token scales (0: none)
ep.param @hidden : index {min = 1 : i64}
ep.param @topk : index {min = 1 : i64}
ep.param @experts_per_rank : index {min = 1 : i64}
ep.param @world : index {min = 1 : i64, at_most = "wave_size"}  // a combine warp indexes every rank with a lane
ep.param @gpu_per_node : index {min = 1 : i64}    // ranks whose windows map each other (world: intranode)
// The op's limits are runtime parameters: one module serves every
// max_tokens and capacity (the window and buffers are sized for the op's
// values; docs/EP.md, "One module for every limit").
ep.param @max_tokens : index {min = 1 : i64, runtime}  // per rank and call
ep.param @capacity : index {min = 1 : i64, runtime}    // tokens one rank can receive
// Inbox rows whose forwarding internode v2 records (nodes * rows per peer
// where the op may run v2, else 0): the size of the route's @route_forward.
ep.param @forward_route_rows : index {runtime}
ep.param @combine_mode : index {names = ["gather", "scatter"]}
ep.param @quant : index {names = ["none", "fp8_direct_cast", "fp8_blockwise"]}  // scatter's transport
ep.param @std_moe : i1 {default_value = false}      // the standard-MoE layout regions
ep.param @combine_elem : !ep.row_elem<"combine_elem">
// The op's combine is ep_combine_low_latency (flagged inboxes; intranode small calls).
ep.param @low_latency : i1 {default_value = false}
// Rows arrive in source order (ep/order: rank-major, each rank's in token order).
ep.param @source_order : i1 {default_value = false}
// Standard MoE's combine returns each (token, k) expert row to its origin,
// which sums them weighted by its top-k weights (ep/combine_entries:
// ep_combine_entries, DeepEP's low-latency combine), instead of each rank
// summing its experts' rows first.
ep.param @entry_combine : i1 {default_value = false}
// Standard MoE's packed rows also in OCP E4M3 with DeepEP's per-128 scales
// (ep/std_moe_quantize): its float scales, power-of-two float scales, or
// UE8M0 bytes.
ep.param @std_moe_quant : index {names = ["none", "deepep_fp8", "deepep_fp8_pow2", "deepep_fp8_ue8m0"], default_value = 0 : index}

// Words of @state.
ep.constant @state_epoch = 0 : index               // the last completed dispatch's epoch
ep.constant @state_dispatch_arrivals = 1 : index   // blocks of this rank done sending (reset by the last)
ep.constant @state_total_recv = 2 : index          // tokens the last dispatch delivered here
ep.constant @state_error = 3 : index               // 0, or one of the error codes below
ep.constant @state_combine_arrivals = 4 : index
ep.constant @state_moe_arrivals = 5 : index
ep.constant @state_recv_counter = 6 : index        // slots senders took here during a dispatch
ep.constant @state_peer_timeout_ms = 7 : index     // how long a wait for a peer may take (the host sets it)
ep.constant @state_stopped = 8 : index             // nonzero: a dispatch's peer wait timed out; kernels do nothing until reset()
ep.constant @state_node_recv = 9 : index           // of state_total_recv, the tokens that came from this rank's node
ep.constant @state_forward_arrivals = 10 : index   // blocks of this rank done forwarding (internode v2)
ep.constant @state_moe_packs = 11 : index          // std-MoE packs so far; the low bit picks @moe_counts' buffer
ep.constant @state_layouts = 12 : index            // dispatch layouts so far; the low bit picks @layout_counts' buffer
ep.constant @state_layout_arrivals = 13 : index    // blocks of the running layout done counting (reset by the last)
ep.constant @state_expert_counts = 14 : index      // expert counts so far; the low bit picks @expert_count_buffers' buffer
ep.constant @state_count_arrivals = 15 : index     // blocks of the running expert count done (reset by the last)
ep.constant @state_words = 16 : index

// What a kernel writes into state_error (EpDispatchCombineOp::check() names them).
ep.constant @error_peer_timeout = 1 : i32          // a peer did not arrive in time
ep.constant @error_capacity_exceeded = 2 : i32     // more tokens arrived than capacity
ep.constant @error_expert_out_of_range = 3 : i32   // an expert index outside [0, world * experts_per_rank)
ep.constant @error_internode_count = 4 : i32       // an off-node peer's row count outside [0, its slots]

// An index slot that routes nowhere (DeepEP's and vLLM's masked or padded
// slots): dispatch skips it, and it counts for no destination.
ep.constant @expert_none = -1 : i32

// @signals holds one flag per rank and meeting: signals[meeting * world + rank].
ep.constant @meeting_dispatch = 0 : index
ep.constant @meeting_combine = 1 : index
ep.constant @meeting_forward = 2 : index           // internode v2: every rank of the node has forwarded
ep.constant @meeting_order = 3 : index             // source order: every rank's totals are in
ep.constant @meetings = 4 : index

// Source order: tokens per chunk of ep_order_count (a warp's unit of work).
ep.constant @order_chunk_tokens = 8 : index

// A call's halves, the bits of a dispatch's or combine's `phases` argument:
// a one-phase call runs both in one launch; a split call (dispatch_send,
// then dispatch_recv) launches each alone, with other work between them.
ep.constant @phase_send = 1 : index      // the transfers, up to this rank's arrival at the meeting
ep.constant @phase_receive = 2 : index   // the wait for every rank, and all that follows it

// The tokens a call moves: `passed` (the rows the caller passed, known on
// the host), or, when counted on the device (`counted` != 0: one graph
// captured at the op's maximum serves every batch size), the int32 at
// `count`, clamped to [0, passed]. Rows past it are not sent, counted,
// summed or written.
func.func private @call_tokens(%passed: index, %count: !ep.ptr<i32>, %counted: index) -> index {
  %c0 = arith.constant 0 : index
  %on_device = arith.cmpi ne, %counted, %c0 : index
  %tokens = scf.if %on_device -> (index) {
    %zero = arith.constant 0 : i32
    %word = ep.load %count[%c0] : !ep.ptr<i32>
    %negative = arith.cmpi slt, %word, %zero : i32
    %at_least_zero = arith.select %negative, %zero, %word : i32
    %rows = arith.index_cast %at_least_zero : i32 to index
    %over = arith.cmpi ugt, %rows, %passed : index
    %clamped = arith.select %over, %passed, %rows : index
    scf.yield %clamped : index
  } else {
    scf.yield %passed : index
  }
  return %tokens : index
}

// Does `phases` include `phase`?
func.func private @runs_phase(%phases: index, %phase: index) -> i1 {
  %zero = arith.constant 0 : i64
  %phases_bits = arith.index_cast %phases : index to i64
  %phase_bit = arith.index_cast %phase : index to i64
  %bit = arith.andi %phases_bits, %phase_bit : i64
  %runs = arith.cmpi ne, %bit, %zero : i64
  return %runs : i1
}

// ceil(a / b), b > 0.
func.func private @ceil_div(%a: index, %b: index) -> index {
  %c1 = arith.constant 1 : index
  %span = arith.addi %a, %b : index
  %span_1 = arith.subi %span, %c1 : index
  %quotient = arith.divui %span_1, %b : index
  return %quotient : index
}
// A row's 128-element blocks.
func.func private @row_blocks() -> index {
  %c128 = arith.constant 128 : index
  %hidden = ep.param_value @hidden : index
  %blocks = func.call @ceil_div(%hidden, %c128) : (index, index) -> index
  return %blocks : index
}
// The most pieces a row takes: pieces of at least two blocks.
func.func private @most_row_pieces() -> index {
  %c2 = arith.constant 2 : index
  %blocks = func.call @row_blocks() : () -> index
  %most = func.call @ceil_div(%blocks, %c2) : (index, index) -> index
  return %most : index
}

// How a kernel that sums rows cuts them into work items (token, piece): as
// many pieces per token as the grid has warps per token, so a small call
// still spreads over the whole grid, and one piece per token once tokens
// outnumber warps. A piece is whole 128-element blocks (fp8 blockwise scales
// start one) and at least 256 elements (a 16-byte load for every lane of a
// wave32 warp). @row_piece_blocks gives a piece's 128-element blocks (a
// caller multiplies by 128 where it indexes, so the compiler sees whole
// 16-byte chunks), @row_pieces how many pieces a row of `hidden` takes.
//
// A small call (@small_row_plan: at most warps / @most_row_pieces tokens)
// takes the most pieces, constants of the specialization, so its plan has no
// division: it is computed after a meeting or after a dependent load, where
// each run-time division (a dozen dependent instructions on sm90) lengthens
// the call. Both functions branch on the token count itself: a branch on the
// piece size would fold back into one division (the compiler sees that the
// constant is that division's value at the constant).
//
// Small: busy * most <= warps, which is most <= warps / busy.
func.func private @small_row_plan(%tokens: index) -> i1 {
  %c1 = arith.constant 1 : index
  %warps = ep.global_warp_count : index
  %most = func.call @most_row_pieces() : () -> index
  %none = arith.cmpi ult, %tokens, %c1 : index
  %busy = arith.select %none, %c1, %tokens : index
  %wanted_most = arith.muli %busy, %most : index
  %small = arith.cmpi ule, %wanted_most, %warps : index
  return %small : i1
}
// A small call's piece: the most pieces' blocks.
func.func private @small_piece_blocks() -> index {
  %blocks = func.call @row_blocks() : () -> index
  %most = func.call @most_row_pieces() : () -> index
  %fewest = func.call @ceil_div(%blocks, %most) : (index, index) -> index
  return %fewest : index
}
func.func private @row_piece_blocks(%tokens: index) -> index {
  %c1 = arith.constant 1 : index
  %blocks = func.call @row_blocks() : () -> index
  %small = func.call @small_row_plan(%tokens) : (index) -> i1
  %piece_blocks = scf.if %small -> (index) {
    %fewest = func.call @small_piece_blocks() : () -> index
    scf.yield %fewest : index
  } else {
    // Fewer than the most pieces, at least one.
    %warps = ep.global_warp_count : index
    %none = arith.cmpi ult, %tokens, %c1 : index
    %busy = arith.select %none, %c1, %tokens : index
    %wanted = arith.divui %warps, %busy : index
    %zero_parts = arith.cmpi ult, %wanted, %c1 : index
    %parts = arith.select %zero_parts, %c1, %wanted : index
    %blocks_per_part = func.call @ceil_div(%blocks, %parts) : (index, index) -> index
    scf.yield %blocks_per_part : index
  }
  return %piece_blocks : index
}
// The pieces of a row cut into pieces of `piece_blocks` (@row_piece_blocks
// of the same `tokens`).
func.func private @row_pieces(%tokens: index, %piece_blocks: index) -> index {
  %c128 = arith.constant 128 : index
  %small = func.call @small_row_plan(%tokens) : (index) -> i1
  %pieces = scf.if %small -> (index) {
    %blocks = func.call @row_blocks() : () -> index
    %fewest = func.call @small_piece_blocks() : () -> index
    %count = func.call @ceil_div(%blocks, %fewest) : (index, index) -> index
    scf.yield %count : index
  } else {
    %hidden = ep.param_value @hidden : index
    %piece = arith.muli %piece_blocks, %c128 : index
    %count = func.call @ceil_div(%hidden, %piece) : (index, index) -> index
    scf.yield %count : index
  }
  return %pieces : index
}

// The calling warp's index when the grid's warps are counted block by
// block, warp 0 of every block first: a loop over a few items from it puts
// consecutive items on different SMs, where the global index would put up
// to a block's worth of them on one (a copy of eight rows then shares one
// SM's bandwidth). No division: the same set of indices, reordered.
func.func private @block_major_warp_index() -> index {
  %warp = ep.warp_index : index
  %block = ep.block_index : index
  %blocks = ep.block_count : index
  %before = arith.muli %warp, %blocks : index
  %index = arith.addi %before, %block : index
  return %index : index
}

// The calling warp's share of a row of `length` elements that its block's
// warps copy together, in whole 16-byte chunks of `chunk` elements: its
// first chunk (@block_share_first) and its element count
// (@block_share_count: 0 past the row's end; the last share ends with the
// row). The caller multiplies the first chunk by its constant `chunk`, where
// the compiler sees the offset's alignment.
func.func private @block_share_chunks(%length: index, %chunk: index) -> index {
  %blocks = ep.block_count : index
  %all_warps = ep.global_warp_count : index
  %warps = arith.divui %all_warps, %blocks : index
  %chunks = func.call @ceil_div(%length, %chunk) : (index, index) -> index
  %share_chunks = func.call @ceil_div(%chunks, %warps) : (index, index) -> index
  return %share_chunks : index
}

func.func private @block_share_first(%length: index, %chunk: index) -> index {
  %warp = ep.warp_index : index
  %share_chunks = func.call @block_share_chunks(%length, %chunk) : (index, index) -> index
  %first = arith.muli %warp, %share_chunks : index
  return %first : index
}

func.func private @block_share_count(%length: index, %chunk: index) -> index {
  %c0 = arith.constant 0 : index
  %share_chunks = func.call @block_share_chunks(%length, %chunk) : (index, index) -> index
  %first = func.call @block_share_first(%length, %chunk) : (index, index) -> index
  %share = arith.muli %share_chunks, %chunk : index
  %at = arith.muli %first, %chunk : index
  %end = arith.addi %at, %share : index
  %past_row = arith.cmpi ugt, %end, %length : index
  %clipped_end = arith.select %past_row, %length, %end : index
  %has_share = arith.cmpi ult, %at, %length : index
  %clipped = arith.subi %clipped_end, %at : index
  %count = arith.select %has_share, %clipped, %c0 : index
  return %count : index
}

// The calling warp's run of [0, count) when the grid's warps split it into
// contiguous runs of `length` = @warp_run_length(count) = ceil(count /
// warps): [warp_run, warp_run_end). A count the grid covers (a small call's,
// computed after a dependent load) is one item per warp, with no division.
func.func private @warp_run_length(%count: index) -> index {
  %c1 = arith.constant 1 : index
  %warps = ep.global_warp_count : index
  %covered = arith.cmpi ule, %count, %warps : index
  %length = scf.if %covered -> (index) {
    %some = arith.cmpi uge, %count, %c1 : index
    %at_most_one = arith.select %some, %c1, %count : index
    scf.yield %at_most_one : index
  } else {
    %runs = func.call @ceil_div(%count, %warps) : (index, index) -> index
    scf.yield %runs : index
  }
  return %length : index
}
func.func private @warp_run(%count: index, %length: index) -> index {
  %warp = ep.global_warp_index : index
  %begin = arith.muli %warp, %length : index
  %past = arith.cmpi ugt, %begin, %count : index
  %clipped = arith.select %past, %count, %begin : index
  return %clipped : index
}
func.func private @warp_run_end(%count: index, %length: index) -> index {
  %c1 = arith.constant 1 : index
  %warp = ep.global_warp_index : index
  %next = arith.addi %warp, %c1 : index
  %end = arith.muli %next, %length : index
  %past = arith.cmpi ugt, %end, %count : index
  %clipped = arith.select %past, %count, %end : index
  return %clipped : index
}

// A route entry's destination rank and slot (rank * capacity + slot; 0 and
// 0 for -1, which counts for nothing): the combines' and internode v2's.
func.func private @entry_rank(%entry: i32) -> index {
  %c0_i32 = arith.constant 0 : i32
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %valid = arith.cmpi sge, %entry, %c0_i32 : i32
  %known = arith.select %valid, %entry, %c0_i32 : i32
  %rank_i32 = arith.divsi %known, %capacity_i32 : i32
  %rank = arith.index_cast %rank_i32 : i32 to index
  return %rank : index
}
func.func private @entry_slot(%entry: i32) -> index {
  %c0_i32 = arith.constant 0 : i32
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %valid = arith.cmpi sge, %entry, %c0_i32 : i32
  %known = arith.select %valid, %entry, %c0_i32 : i32
  %slot_i32 = arith.remsi %known, %capacity_i32 : i32
  %slot = arith.index_cast %slot_i32 : i32 to index
  return %slot : index
}

// The symmetric window, in this order. Counts are in elements; 0 leaves a
// region empty in specializations that do not use it.
ep.window_region @state : i32 {
  %words = ep.constant_value @state_words : index
  ep.yield %words : index
}
ep.window_region @signals : i32 {
  %meetings = ep.constant_value @meetings : index
  %world = ep.param_value @world : index
  %flags = arith.muli %meetings, %world : index
  ep.yield %flags : index
}
ep.window_region @recv_tokens : i32 {
  %capacity = ep.param_value @capacity : index
  %words = ep.param_value @token_words : index
  %count = arith.muli %capacity, %words : index
  ep.yield %count : index
}
ep.window_region @recv_weights : f32 {
  %capacity = ep.param_value @capacity : index
  %topk = ep.param_value @topk : index
  %count = arith.muli %capacity, %topk : index
  ep.yield %count : index
}
ep.window_region @recv_scales : i8 {
  %capacity = ep.param_value @capacity : index
  %bytes = ep.param_value @scale_bytes : index
  %count = arith.muli %capacity, %bytes : index
  ep.yield %count : index
}
ep.window_region @recv_indices : i32 {
  %capacity = ep.param_value @capacity : index
  %topk = ep.param_value @topk : index
  %count = arith.muli %capacity, %topk : index
  ep.yield %count : index
}
// Per received token: its source rank * max_tokens + token, and its destination ordinal.
ep.window_region @recv_origin : i32 {
  %c2 = arith.constant 2 : index
  %capacity = ep.param_value @capacity : index
  %count = arith.muli %capacity, %c2 : index
  ep.yield %count : index
}
// Gather, and internode (v2 reduces a node's contributions gather-style in
// either mode): expert outputs staged where their origins read them.
ep.window_region @combine_rows : !ep.row_elem<"combine_elem"> {
  %c0 = arith.constant 0 : index
  %mode = ep.param_value @combine_mode : index
  %world = ep.param_value @world : index
  %per_node = ep.param_value @gpu_per_node : index
  %gather = arith.cmpi eq, %mode, %c0 : index
  %internode = arith.cmpi ult, %per_node, %world : index
  %staging = arith.ori %gather, %internode : i1
  %capacity = ep.param_value @capacity : index
  %hidden = ep.param_value @hidden : index
  %rows = arith.muli %capacity, %hidden : index
  %count = arith.select %staging, %rows, %c0 : index
  ep.yield %count : index
}
ep.window_region @combine_weights : f32 {
  %c0 = arith.constant 0 : index
  %mode = ep.param_value @combine_mode : index
  %world = ep.param_value @world : index
  %per_node = ep.param_value @gpu_per_node : index
  %gather = arith.cmpi eq, %mode, %c0 : index
  %internode = arith.cmpi ult, %per_node, %world : index
  %staging = arith.ori %gather, %internode : i1
  %capacity = ep.param_value @capacity : index
  %topk = ep.param_value @topk : index
  %weights = arith.muli %capacity, %topk : index
  %count = arith.select %staging, %weights, %c0 : index
  ep.yield %count : index
}
// Scatter: each origin's inbox, a row per (token, destination ordinal): plain
// rows, or fp8 codes (and blockwise scales) under quant.
ep.window_region @scatter_rows : !ep.row_elem<"combine_elem"> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %mode = ep.param_value @combine_mode : index
  %quant = ep.param_value @quant : index
  %scatter = arith.cmpi eq, %mode, %c1 : index
  %plain = arith.cmpi eq, %quant, %c0 : index
  %used = arith.andi %scatter, %plain : i1
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %hidden = ep.param_value @hidden : index
  %boxes = arith.muli %max_tokens, %topk : index
  %elements = arith.muli %boxes, %hidden : index
  %count = arith.select %used, %elements, %c0 : index
  ep.yield %count : index
}
ep.window_region @scatter_codes : i8 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %mode = ep.param_value @combine_mode : index
  %quant = ep.param_value @quant : index
  %scatter = arith.cmpi eq, %mode, %c1 : index
  %quantized = arith.cmpi ne, %quant, %c0 : index
  %used = arith.andi %scatter, %quantized : i1
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %hidden = ep.param_value @hidden : index
  %boxes = arith.muli %max_tokens, %topk : index
  %codes = arith.muli %boxes, %hidden : index
  %count = arith.select %used, %codes, %c0 : index
  ep.yield %count : index
}
ep.window_region @scatter_scales : f32 {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c127 = arith.constant 127 : index
  %c128 = arith.constant 128 : index
  %quant = ep.param_value @quant : index
  %blockwise = arith.cmpi eq, %quant, %c2 : index
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %hidden = ep.param_value @hidden : index
  %padded = arith.addi %hidden, %c127 : index
  %blocks = arith.divui %padded, %c128 : index
  %boxes = arith.muli %max_tokens, %topk : index
  %scales = arith.muli %boxes, %blocks : index
  %count = arith.select %blockwise, %scales, %c0 : index
  ep.yield %count : index
}
ep.window_region @scatter_weights : f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %mode = ep.param_value @combine_mode : index
  %scatter = arith.cmpi eq, %mode, %c1 : index
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %boxes = arith.muli %max_tokens, %topk : index
  %weights = arith.muli %boxes, %topk : index
  %count = arith.select %scatter, %weights, %c0 : index
  ep.yield %count : index
}
// Standard MoE: two buffers of per-expert counts (local), a pack counting
// in one while it clears the other for the next pack (state_moe_packs'
// low bit picks), then as many words that are never written: the zeros it
// copies over the other buffer (one lane-parallel copy, not a word at a
// time). And the packed position of each received (token, k).
ep.window_region @moe_counts : i32 {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %std_moe = ep.param_value @std_moe : i1
  %experts = ep.param_value @experts_per_rank : index
  %thrice = arith.muli %experts, %c3 : index
  %count = arith.select %std_moe, %thrice, %c0 : index
  ep.yield %count : index
}
// ep_dispatch_layout's counts (per rank, per expert, then per node, padded
// to whole 16-byte lines so that each buffer starts on one): the one its call
// counts into, the one it clears for the next call, and zeros to clear from.
// (ep_dispatch_layout computes the same words inline, so that they fold to
// a constant its copies' alignment is proven from.)
ep.window_region @layout_counts : i32 {
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %world = ep.param_value @world : index
  %epr = ep.param_value @experts_per_rank : index
  %per_node = ep.param_value @gpu_per_node : index
  %nodes = arith.divui %world, %per_node : index
  %experts = arith.muli %world, %epr : index
  %ranks_and_experts = arith.addi %world, %experts : index
  %counts = arith.addi %ranks_and_experts, %nodes : index
  %up = arith.addi %counts, %c3 : index
  %lines = arith.divui %up, %c4 : index
  %words = arith.muli %lines, %c4 : index
  %thrice = arith.muli %words, %c3 : index
  ep.yield %thrice : index
}
// ep_count_experts' counts per local expert: the one its call counts into,
// the one it clears for the next call, and zeros to clear from.
ep.window_region @expert_count_buffers : i32 {
  %c3 = arith.constant 3 : index
  %epr = ep.param_value @experts_per_rank : index
  %thrice = arith.muli %epr, %c3 : index
  ep.yield %thrice : index
}
ep.window_region @moe_slots : i32 {
  %c0 = arith.constant 0 : index
  %std_moe = ep.param_value @std_moe : i1
  %capacity = ep.param_value @capacity : index
  %topk = ep.param_value @topk : index
  %slots = arith.muli %capacity, %topk : index
  %count = arith.select %std_moe, %slots, %c0 : index
  ep.yield %count : index
}
// Low-latency combine: each origin's flagged inbox (ep/combine_low_latency),
// a flagged row per (token, destination ordinal), twice the row's bytes, and
// its flagged weights (top-k padded to a multiple of 4, twice).
ep.window_region @flagged_rows : !ep.row_elem<"combine_elem"> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %low_latency = ep.param_value @low_latency : i1
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %hidden = ep.param_value @hidden : index
  %boxes = arith.muli %max_tokens, %topk : index
  %elements = arith.muli %boxes, %hidden : index
  %lines = arith.muli %elements, %c2 : index
  %count = arith.select %low_latency, %lines, %c0 : index
  ep.yield %count : index
}
ep.window_region @flagged_weights : f32 {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %low_latency = ep.param_value @low_latency : i1
  %max_tokens = ep.param_value @max_tokens : index
  %topk = ep.param_value @topk : index
  %topk_up = arith.addi %topk, %c3 : index
  %quads = arith.divui %topk_up, %c4 : index
  %padded = arith.muli %quads, %c4 : index
  %boxes = arith.muli %max_tokens, %topk : index
  %weights = arith.muli %boxes, %padded : index
  %lines = arith.muli %weights, %c2 : index
  %count = arith.select %low_latency, %lines, %c0 : index
  ep.yield %count : index
}
// Source order (ep/order): per chunk of tokens, how many go to each rank
// (f32: a prefix is one lane-parallel sum), local; every rank's totals per
// destination, written by each rank into every node rank's copy; each
// chunk's next slot on each rank, local.
ep.window_region @order_chunk_counts : f32 {
  %c0 = arith.constant 0 : index
  %source_order = ep.param_value @source_order : i1
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %cells = arith.muli %world, %max_tokens : index
  %count = arith.select %source_order, %cells, %c0 : index
  ep.yield %count : index
}
ep.window_region @order_matrix : f32 {
  %c0 = arith.constant 0 : index
  %source_order = ep.param_value @source_order : i1
  %world = ep.param_value @world : index
  %cells = arith.muli %world, %world : index
  %count = arith.select %source_order, %cells, %c0 : index
  ep.yield %count : index
}
ep.window_region @order_offsets : i32 {
  %c0 = arith.constant 0 : index
  %source_order = ep.param_value @source_order : i1
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %per_node = ep.param_value @gpu_per_node : index
  %cells = arith.muli %world, %max_tokens : index
  // Across nodes, as many again: each chunk's shift to outbox places (ep/order).
  %across = arith.cmpi ult, %per_node, %world : index
  %doubled = arith.addi %cells, %cells : index
  %all = arith.select %across, %doubled, %cells : index
  %count = arith.select %source_order, %all, %c0 : index
  ep.yield %count : index
}
// Entry combine: the packed expert outputs [experts_per_rank, world *
// max_tokens, hidden] the origins read (staged by ep_combine_entries, or
// written in place: std_moe_combine_input()).
ep.window_region @moe_entry_rows : bf16 {
  %c0 = arith.constant 0 : index
  %entry_combine = ep.param_value @entry_combine : i1
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %hidden = ep.param_value @hidden : index
  %per_expert = arith.muli %world, %max_tokens : index
  %rows = arith.muli %epr, %per_expert : index
  %elements = arith.muli %rows, %hidden : index
  %count = arith.select %entry_combine, %elements, %c0 : index
  ep.yield %count : index
}
