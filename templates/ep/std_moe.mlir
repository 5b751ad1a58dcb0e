// ep/std_moe: the standard-MoE layout, out of dispatch into a packed
// [experts_per_rank, world * max_tokens, hidden] bf16 tensor with counts and
// a source map, and back into combine's input.
ep.include "ep/common"
ep.include "ep/sync"

// Row `position` of (this rank's) expert `expert` in the packed layout
// [experts_per_rank, world * max_tokens, hidden].
func.func private @expert_row(%expert: index, %position: index) -> index {
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %rows_per_expert = arith.muli %world, %max_tokens : index
  %local = arith.remui %expert, %epr : index
  %base = arith.muli %local, %rows_per_expert : index
  %row = arith.addi %base, %position : index
  return %row : index
}

// The packed row of received token `i`'s top-k entry `j` (entries from
// `row` = i * topk), whose expert is `expert_i32`: its local expert's next
// free row, counted in `moe_counts` and taken here (with the token's slot as
// its source and the position in moe_slots), or -1 when the entry names
// another rank's expert or an expert an earlier entry named.
func.func private @take_packed_row(%expert_i32: i32, %indices: !ep.ptr<i32>, %moe_counts: !ep.ptr<i32>,
                                   %sources: !ep.ptr<i32>, %slots: !ep.ptr<i32>, %i: index, %row: index, %j: index,
                                   %rank: index) -> index {
  %one = arith.constant 1 : i32
  %none = arith.constant -1 : index
  %true = arith.constant true
  %epr = ep.param_value @experts_per_rank : index
  %at = arith.addi %row, %j : index
  %expert = arith.index_cast %expert_i32 : i32 to index
  %owner = arith.divui %expert, %epr : index
  %here = arith.cmpi eq, %owner, %rank : index
  %live = scf.if %here -> (i1) {
    %repeat = func.call @expert_repeats_earlier(%indices, %row, %j) : (!ep.ptr<i32>, index, index) -> i1
    %fresh = arith.xori %repeat, %true : i1
    scf.yield %fresh : i1
  } else {
    %false = arith.constant false
    scf.yield %false : i1
  }
  %packed_row = scf.if %live -> (index) {
    %local = arith.remui %expert, %epr : index
    %taken = ep.atomic_rmw add %moe_counts[%local], %one scope(agent) order(relaxed) : !ep.ptr<i32>
    %taken_index = arith.index_cast %taken : i32 to index
    %taken_row = func.call @expert_row(%expert, %taken_index) : (index, index) -> index
    %i_i32 = arith.index_cast %i : index to i32
    ep.store %i_i32, %sources[%taken_row] : !ep.ptr<i32>
    ep.store %taken, %slots[%at] : !ep.ptr<i32>
    scf.yield %taken_row : index
  } else {
    scf.yield %none : index
  }
  return %packed_row : index
}

// Whether entry j of the token whose entries start at `row` (its expert
// `expert`) took a packed row on this rank: its expert is here and no
// earlier entry of the token named it. What reads the packed rows back (the
// unpack, the fp8 cast) asks this of every entry.
func.func private @entry_packed_here(%indices: !ep.ptr<i32>, %row: index, %j: index, %expert: index,
                                     %rank: index) -> i1 {
  %true = arith.constant true
  %epr = ep.param_value @experts_per_rank : index
  %owner = arith.divui %expert, %epr : index
  %here = arith.cmpi eq, %owner, %rank : index
  %repeat = func.call @expert_repeats_earlier(%indices, %row, %j) : (!ep.ptr<i32>, index, index) -> i1
  %fresh = arith.xori %repeat, %true : i1
  %valid = arith.andi %here, %fresh : i1
  return %valid : i1
}

// A tiny pack (no more top-k entries than blocks): block b packs entry b.
// Warp 0 takes the packed row (its expert `lead_expert` read early) while
// every warp loads its share of the token's row (ep.warp.copy_row_around);
// warp 0 marks an entry that takes no row with -1 in moe_slots, and after
// the block's barrier each warp reads the entry's position there and stores
// its share. A row of 14 KB crosses in one round of loads per warp instead
// of 3.5 rounds of one warp's.
func.func private @pack_entry_by_block(%lead_expert: i32, %indices: !ep.ptr<i32>, %moe_counts: !ep.ptr<i32>,
                                       %sources: !ep.ptr<i32>, %slots: !ep.ptr<i32>, %token: !ep.ptr<bf16>,
                                       %packed: !ep.ptr<bf16>, %rank: index) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %none = arith.constant -1 : index
  %zero = arith.constant 0 : i32
  %no_position = arith.constant -1 : i32
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %block = ep.block_index : index
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  %i = arith.divui %block, %topk : index
  %j = arith.remui %block, %topk : index
  %row = arith.muli %i, %topk : index
  // Warp 0's expert came with the state words; the others read it now, in
  // flight with their share of the row.
  %expert_i32 = scf.if %lead -> (i32) {
    scf.yield %lead_expert : i32
  } else {
    %read = ep.load %indices[%block] : !ep.ptr<i32>
    scf.yield %read : i32
  }
  %share_chunk = func.call @block_share_first(%hidden, %c8) : (index, index) -> index
  %share_count = func.call @block_share_count(%hidden, %c8) : (index, index) -> index
  %share_at = arith.muli %share_chunk, %c8 : index
  %token_row = arith.muli %i, %hidden : index
  %token_at = arith.addi %token_row, %share_at : index
  ep.warp.copy_row_around %token[%token_at], %share_count : !ep.ptr<bf16> {
    scf.if %lead {
      %taken_row = func.call @take_packed_row(%expert_i32, %indices, %moe_counts, %sources, %slots, %i, %row, %j, %rank)
          : (i32, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, index, index) -> index
      %takes_none = arith.cmpi eq, %taken_row, %none : index
      scf.if %takes_none {
        ep.store %no_position, %slots[%block] : !ep.ptr<i32>
      }
    }
    ep.block_barrier
    %position_i32 = ep.load %slots[%block] : !ep.ptr<i32>
    %live = arith.cmpi sge, %position_i32, %zero : i32
    %kept_i32 = arith.select %live, %position_i32, %zero : i32
    %position = arith.index_cast %kept_i32 : i32 to index
    %expert = arith.index_cast %expert_i32 : i32 to index
    %packed_row = func.call @expert_row(%expert, %position) : (index, index) -> index
    %packed_row_at = arith.muli %packed_row, %hidden : index
    %packed_at = arith.addi %packed_row_at, %share_at : index
    %destination = ep.ptr_add %packed, %packed_at : !ep.ptr<bf16>
    ep.copy_to %live, %destination : !ep.ptr<bf16>
  }
  return
}

// Standard MoE, out of dispatch: every received token once per local expert
// it routes to, packed per expert in arrival order, with its receive slot as
// the source map and the per-expert counts. The counts are taken in one of
// @moe_counts' two buffers while a warp clears the other for the next pack;
// the last block publishes them. (Clearing the counted buffer after
// publishing them was one more dependent round trip at the end of every
// pack.)
ep.kernel @ep_std_moe_pack(%packed: !ep.ptr<bf16>, %counts: !ep.ptr<i32>, %sources: !ep.ptr<i32>,
                           %rank: index, %w: !ep.window) warps_per_block(4)
    when(@std_moe) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %total_word = ep.constant_value @state_total_recv : index
  %packs_word = ep.constant_value @state_moe_packs : index
  %arrivals = ep.constant_value @state_moe_arrivals : index
  %one = arith.constant 1 : i32
  %none = arith.constant -1 : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %capacity = ep.param_value @capacity : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %packs = ep.load %state[%packs_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %moe_counts = ep.peer_ptr %w[%rank] @moe_counts[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %token = ep.peer_ptr %w[%rank] @recv_tokens[%c0] : !ep.ptr<bf16>
  // Warps counted block by block, so consecutive items copy on different SMs.
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  // A small call's warp takes entry `first` (by warp; by block, warp 0's
  // `first` is its block's entry): its expert is read here, in flight with
  // the state words (dispatch wrote the received indices before this kernel).
  %index_words = arith.muli %capacity, %topk : index
  %in_indices = arith.cmpi ult, %first, %index_words : index
  %early_expert = scf.if %in_indices -> (i32) {
    %expert = ep.load %indices[%first] : !ep.ptr<i32>
    scf.yield %expert : i32
  } else {
    %no_expert = ep.constant_value @expert_none : i32
    scf.yield %no_expert : i32
  }
  %parity_i32 = arith.andi %packs, %one : i32
  %parity = arith.index_cast %parity_i32 : i32 to index
  %counting_at = arith.muli %parity, %epr : index
  %clearing_at = arith.subi %epr, %counting_at : index
  %counting = ep.ptr_add %moe_counts, %counting_at : !ep.ptr<i32>
  // The next pack's buffer, cleared on the grid's last warp (idle in a
  // small call); the last pack published it, and this one does not use it.
  %last_warp = arith.subi %stride, %c1 : index
  %clears = arith.cmpi eq, %first, %last_warp : index
  scf.if %clears {
    %zeros_at = arith.muli %epr, %c2 : index
    ep.warp.copy_row %moe_counts[%zeros_at], %moe_counts[%clearing_at], %epr : !ep.ptr<i32> -> !ep.ptr<i32>
  }
  %entries = arith.muli %total, %topk : index
  %blocks = ep.block_count : index
  %by_block = arith.cmpi ule, %entries, %blocks : index
  %by_entry = arith.cmpi ule, %entries, %stride : index
  scf.if %by_block {
    %block = ep.block_index : index
    %block_has_entry = arith.cmpi ult, %block, %entries : index
    scf.if %block_has_entry {
      func.call @pack_entry_by_block(%early_expert, %indices, %counting, %sources, %slots, %token, %packed, %rank)
          : (i32, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<bf16>, !ep.ptr<bf16>, index) -> ()
    }
  } else {
    scf.if %by_entry {
      // A small call: a warp per top-k entry, so a token's rows to its
      // experts copy on as many SMs (one warp per token storing its row to
      // each expert took 20.9 us at eight tokens at EP1, 5.7 us this way).
      %has_entry = arith.cmpi ult, %first, %entries : index
      scf.if %has_entry {
        %i = arith.divui %first, %topk : index
        %j = arith.remui %first, %topk : index
        %row = arith.muli %i, %topk : index
        %token_at = arith.muli %i, %hidden : index
        // The row's first loads are in flight while the warp takes its packed row.
        ep.warp.copy_row_around %token[%token_at], %hidden : !ep.ptr<bf16> {
          %packed_row = func.call @take_packed_row(%early_expert, %indices, %counting, %sources, %slots, %i, %row, %j, %rank)
              : (i32, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, index, index) -> index
          %live = arith.cmpi ne, %packed_row, %none : index
          %row_or_first = arith.select %live, %packed_row, %c0 : index
          %packed_at = arith.muli %row_or_first, %hidden : index
          %destination = ep.ptr_add %packed, %packed_at : !ep.ptr<bf16>
          ep.copy_to %live, %destination : !ep.ptr<bf16>
        }
      }
    } else {
      // Otherwise a warp per token: its row is read once and stored to each
      // local expert it routes to (a warp per entry re-read every row from
      // the cache: 302 -> 447 us at 8192 tokens).
      scf.for %i = %first to %total step %stride {
        %row = arith.muli %i, %topk : index
        %token_at = arith.muli %i, %hidden : index
        ep.warp.fanout_row %token[%token_at], %hidden, destinations(%topk) : !ep.ptr<bf16> {
        ^bb0(%j: index):
          %at = arith.addi %row, %j : index
          %expert = ep.load %indices[%at] : !ep.ptr<i32>
          %packed_row = func.call @take_packed_row(%expert, %indices, %counting, %sources, %slots, %i, %row, %j, %rank)
              : (i32, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<i32>, index, index, index, index) -> index
          %live = arith.cmpi ne, %packed_row, %none : index
          %row_or_first = arith.select %live, %packed_row, %c0 : index
          %packed_at = arith.muli %row_or_first, %hidden : index
          %destination = ep.ptr_add %packed, %packed_at : !ep.ptr<bf16>
          ep.destination %live, %destination : !ep.ptr<bf16>
        }
      }
    }
  }
  // The last block publishes the counts (one lane-parallel copy) and hands
  // the other buffer to the next pack, which this stream runs after it.
  ep.block_barrier
  %warp = ep.warp_index : index
  %lead = arith.cmpi eq, %warp, %c0 : index
  scf.if %lead {
    %last = func.call @count_block_arrival(%w, %rank, %arrivals) : (!ep.window, index, index) -> i1
    scf.if %last {
      %next_packs = arith.addi %packs, %one : i32
      ep.store %next_packs, %state[%packs_word] : !ep.ptr<i32>
      ep.fence scope(agent) order(acquire)
      ep.warp.copy_row %counting[%c0], %counts[%c0], %epr : !ep.ptr<i32> -> !ep.ptr<i32>
    }
  }
}

// Standard MoE, back into combine: elements [first_block * 128, + n) of
// received token `i`'s row of combine's input, into `dst` (where that piece
// goes), are the f32 sum of its local experts' output rows in `expert_out`
// (each expert once, in top-k order), rounded once. The piece's offset is
// whole 128-element blocks here, where the compiler sees it (vector loads).
func.func private @unpack_piece(%expert_out: !ep.ptr<bf16>, %dst: !ep.ptr<!ep.row_elem<"combine_elem">>,
                                %w: !ep.window, %rank: index, %i: index, %first_block: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %c = arith.muli %first_block, %c128 : index
  %row = arith.muli %i, %topk : index
  // Source j: the packed row of (token, k = j) when its expert is here and not a repeat.
  ep.warp.sum_rows %dst[%c0], %n, sources(%topk) : !ep.ptr<!ep.row_elem<"combine_elem">> {
  ^bb0(%j: index):
    %at = arith.addi %row, %j : index
    %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
    %expert = arith.index_cast %expert_i32 : i32 to index
    %valid = func.call @entry_packed_here(%indices, %row, %j, %expert, %rank)
        : (!ep.ptr<i32>, index, index, index, index) -> i1
    %position_i32 = ep.load %slots[%at] : !ep.ptr<i32>
    %position = arith.index_cast %position_i32 : i32 to index
    %packed_row = func.call @expert_row(%expert, %position) : (index, index) -> index
    %packed_row_at = arith.muli %packed_row, %hidden : index
    %packed_at = arith.addi %packed_row_at, %c : index
    %src = ep.ptr_add %expert_out, %packed_at : !ep.ptr<bf16>
    ep.source %valid, %src : !ep.ptr<bf16>
  }
  return
}

// Each of the `total` received tokens' row of combine's input
// (@unpack_piece), by (token, piece) items on warps counted block by block,
// as combine's sums. (Prefetching the first item's indices and packed
// positions while the received count comes back measured nothing: 3.84 ->
// 3.84 us at one token.)
func.func private @unpack_received(%expert_out: !ep.ptr<bf16>, %combine_in: !ep.ptr<!ep.row_elem<"combine_elem">>,
                                   %w: !ep.window, %rank: index, %total: index) {
  %c128 = arith.constant 128 : index
  %hidden = ep.param_value @hidden : index
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  %chunk_blocks = func.call @row_piece_blocks(%total) : (index) -> index
  %chunk = arith.muli %chunk_blocks, %c128 : index
  %chunks = func.call @row_pieces(%total, %chunk_blocks) : (index, index) -> index
  %items = arith.muli %total, %chunks : index
  scf.for %item = %first to %items step %stride {
    %i = arith.divui %item, %chunks : index
    %piece = arith.remui %item, %chunks : index
    %first_block = arith.muli %piece, %chunk_blocks : index
    %c = arith.muli %first_block, %c128 : index
    %out_at = arith.muli %i, %hidden : index
    %left = arith.subi %hidden, %c : index
    %short = arith.cmpi ult, %left, %chunk : index
    %n = arith.select %short, %left, %chunk : index
    %out_chunk = arith.addi %out_at, %c : index
    %dst = ep.ptr_add %combine_in, %out_chunk : !ep.ptr<!ep.row_elem<"combine_elem">>
    func.call @unpack_piece(%expert_out, %dst, %w, %rank, %i, %first_block, %n)
        : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index, index, index) -> ()
  }
  return
}

// Standard MoE, back into combine's input (@unpack_received), for the
// internode combines, which do not unpack themselves. (Intranode, gather
// combine unpacks in its own kernel, ep/combine_gather, and scatter in its
// stage 1, ep/combine_scatter: an intranode module has no such kernel.)
ep.kernel @ep_std_moe_unpack(%expert_out: !ep.ptr<bf16>, %combine_in: !ep.ptr<!ep.row_elem<"combine_elem">>,
                             %rank: index, %w: !ep.window) warps_per_block(4)
    when(@std_moe and @gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  func.call @unpack_received(%expert_out, %combine_in, %w, %rank, %total)
      : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index) -> ()
}
