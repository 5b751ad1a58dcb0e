// ep/buffers: the memory outside the window that the kernels and the host
// (or a framework layer above the op) both read or write, each part with its
// element type, count and meaning. The interface record states their layout
// (each buffer one allocation, its parts in this order); the runtime
// allocates from it and every layer above reads the parts from it, and the
// kernels reach a part through ep.buffer_offset. Nothing about these layouts
// is written anywhere else.
ep.include "ep/common"

// The route map: where each (token, k) of a dispatch went, read by combine,
// by a replay and by whoever saves and loads a routing (route_map(),
// load_routing(), the MORI layer's handles). One per op and one per Routing.
ep.buffer_part @route_entries in "route" : i32 attributes {
    meaning = "per source token, top-k entries: its distinct destinations in order of first appearance as rank * capacity + slot, then -1"} {
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %entries = arith.muli %max_tokens, %topk : index
  ep.yield %entries : index
}
ep.buffer_part @route_received in "route" : i32 attributes {
    meaning = "the tokens this rank received in the dispatch that wrote the map (internode: from every node)"} {
  %c1 = arith.constant 1 : index
  ep.yield %c1 : index
}
ep.buffer_part @route_sent in "route" : i32 attributes {
    meaning = "per world rank, the tokens sent to it through this rank's outbox (off-node ranks; 0 for the node's)"} {
  %world = ep.param_value @world : index
  ep.yield %world : index
}
ep.buffer_part @route_source_first in "route" : i32 attributes {
    meaning = "source order across nodes: per world rank, the received row its first token took here (off-node ranks; 0 for the node's); no words otherwise"} {
  %c0 = arith.constant 0 : index
  %source_order = ep.param_value @source_order : i1
  %world = ep.param_value @world : index
  %per_node = ep.param_value @gpu_per_node : index
  %internode = arith.cmpi ult, %per_node, %world : index
  %kept = arith.andi %source_order, %internode : i1
  %words = arith.select %kept, %world, %c0 : index
  ep.yield %words : index
}
ep.buffer_part @route_forward in "route" : i32 attributes {
    meaning = "internode v2: per inbox row and top-k entry, where this rank forwarded it inside its node (rank * capacity + slot, or -1)"} {
  %topk = ep.param_value @topk : index
  %rows = ep.param_value @forward_route_rows : index
  %entries = arith.muli %rows, %topk : index
  ep.yield %entries : index
}

// A kept call (DispatchOptions::keep_call): what a dispatch received and
// what it was asked, for a Routing that outlives the window's next call.
// The dispatch kernel copies whole 16-byte lines into both.
ep.buffer_part @kept_origins in "kept" : i32 attributes {align = 16 : i64,
    meaning = "per received row, its origin (rank * max_tokens + token) and destination ordinal; -1 where no row was kept"} {
  %c2 = arith.constant 2 : index
  %capacity = ep.param_value @capacity : index
  %words = arith.muli %capacity, %c2 : index
  ep.yield %words : index
}
ep.buffer_part @kept_indices in "kept" : i32 attributes {align = 16 : i64,
    meaning = "the dispatch's expert indices, top-k per token"} {
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %entries = arith.muli %max_tokens, %topk : index
  ep.yield %entries : index
}

// What combine and ep_count_experts write for the caller.
ep.buffer_part @out_tokens in "outputs" : !ep.row_elem<"combine_elem"> attributes {align = 16 : i64,
    meaning = "combine's output rows, one per token of the dispatch"} {
  %max_tokens = ep.param_value @max_tokens : index
  %hidden = ep.param_value @hidden : index
  %elements = arith.muli %max_tokens, %hidden : index
  ep.yield %elements : index
}
ep.buffer_part @out_weights in "outputs" : f32 attributes {align = 16 : i64,
    meaning = "combine's output weights, top-k per token"} {
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %entries = arith.muli %max_tokens, %topk : index
  ep.yield %entries : index
}
ep.buffer_part @expert_counts in "outputs" : i32 attributes {align = 16 : i64,
    meaning = "ep_count_experts: received tokens per local expert, then the received count"} {
  %c1 = arith.constant 1 : index
  %experts = ep.param_value @experts_per_rank : index
  %words = arith.addi %experts, %c1 : index
  ep.yield %words : index
}

// ep_narrow_indices' output: int64 top-k ids as the kernels read them.
ep.buffer_part @narrow_indices in "outputs" : i32 attributes {align = 16 : i64,
    meaning = "a call's int64 top-k ids narrowed to int32 (ep_narrow_indices), top-k per token"} {
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %entries = arith.muli %max_tokens, %topk : index
  ep.yield %entries : index
}

// Standard MoE (bf16): the packed layout [experts_per_rank, world *
// max_tokens, hidden] the experts read, its counts and source map, and the
// rows scatter sums before they leave (internode, or under quant).
ep.buffer_part @moe_tokens in "std_moe" : bf16 attributes {align = 16 : i64,
    meaning = "packed rows per local expert"} {
  %c0 = arith.constant 0 : index
  %std_moe = ep.param_value @std_moe : i1
  %experts = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %per_expert = arith.muli %world, %max_tokens : index
  %rows = arith.muli %experts, %per_expert : index
  %hidden = ep.param_value @hidden : index
  %elements = arith.muli %rows, %hidden : index
  %count = arith.select %std_moe, %elements, %c0 : index
  ep.yield %count : index
}
ep.buffer_part @moe_counts_out in "std_moe" : i32 attributes {align = 16 : i64,
    meaning = "packed rows per local expert, counted"} {
  %c0 = arith.constant 0 : index
  %std_moe = ep.param_value @std_moe : i1
  %experts = ep.param_value @experts_per_rank : index
  %count = arith.select %std_moe, %experts, %c0 : index
  ep.yield %count : index
}
ep.buffer_part @moe_sources in "std_moe" : i32 attributes {align = 16 : i64,
    meaning = "per packed row, the received row it came from"} {
  %c0 = arith.constant 0 : index
  %std_moe = ep.param_value @std_moe : i1
  %experts = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %per_expert = arith.muli %world, %max_tokens : index
  %rows = arith.muli %experts, %per_expert : index
  %count = arith.select %std_moe, %rows, %c0 : index
  ep.yield %count : index
}
// With std_moe_quant: the packed rows' OCP E4M3 codes and their scales in
// DeepEP's column-major layouts (ep/std_moe_quantize).
ep.buffer_part @moe_codes in "std_moe" : i8 attributes {align = 16 : i64,
    meaning = "std_moe_quant: packed rows per local expert in fp8"} {
  %c0 = arith.constant 0 : index
  %std_moe = ep.param_value @std_moe : i1
  %quant = ep.param_value @std_moe_quant : index
  %quantized = arith.cmpi ne, %quant, %c0 : index
  %used = arith.andi %std_moe, %quantized : i1
  %experts = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %per_expert = arith.muli %world, %max_tokens : index
  %rows = arith.muli %experts, %per_expert : index
  %hidden = ep.param_value @hidden : index
  %elements = arith.muli %rows, %hidden : index
  %count = arith.select %used, %elements, %c0 : index
  ep.yield %count : index
}
ep.buffer_part @moe_scales in "std_moe" : i8 attributes {align = 16 : i64,
    meaning = "std_moe_quant: the codes' scales, f32 or UE8M0 bytes per 128 elements"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %std_moe = ep.param_value @std_moe : i1
  %quant = ep.param_value @std_moe_quant : index
  %quantized = arith.cmpi ne, %quant, %c0 : index
  %used = arith.andi %std_moe, %quantized : i1
  %ue8m0 = arith.cmpi eq, %quant, %c3 : index
  %scale_bytes = arith.select %ue8m0, %c1, %c4 : index
  %experts = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %per_expert = arith.muli %world, %max_tokens : index
  %rows = arith.muli %experts, %per_expert : index
  %hidden = ep.param_value @hidden : index
  %blocks = arith.divui %hidden, %c128 : index
  %row_scales = arith.muli %rows, %blocks : index
  %bytes = arith.muli %row_scales, %scale_bytes : index
  %count = arith.select %used, %bytes, %c0 : index
  ep.yield %count : index
}
ep.buffer_part @moe_combine_in in "std_moe" : bf16 attributes {align = 16 : i64,
    meaning = "scatter, internode or under quant: the unpacked rows summed before they leave"} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %std_moe = ep.param_value @std_moe : i1
  %mode = ep.param_value @combine_mode : index
  %quant = ep.param_value @quant : index
  %world = ep.param_value @world : index
  %per_node = ep.param_value @gpu_per_node : index
  %scatter = arith.cmpi eq, %mode, %c1 : index
  %quantized = arith.cmpi ne, %quant, %c0 : index
  %internode = arith.cmpi ult, %per_node, %world : index
  %staged = arith.ori %internode, %quantized : i1
  %scatter_staged = arith.andi %scatter, %staged : i1
  %used = arith.andi %std_moe, %scatter_staged : i1
  %capacity = ep.param_value @capacity : index
  %hidden = ep.param_value @hidden : index
  %elements = arith.muli %capacity, %hidden : index
  %count = arith.select %used, %elements, %c0 : index
  ep.yield %count : index
}
