// ep/combine: what gather and scatter combine share once every rank has
// staged its contributions: each of this rank's tokens is the f32 sum of its
// contributions in destination order (the first one converted, the others
// added), rounded once. Gather reads them from the destinations' windows;
// scatter from this rank's inbox, decoding fp8 codes under quant. The mode is
// a parameter, so each specialization keeps one of the two addressings.
ep.include "ep/common"
ep.include "ep/sync"

// How many contributions a token's sum takes (sum_contributions): one per
// top-k entry, or, when top-k exceeds the world, `world`. A token has one
// route entry per destination rank (rank * capacity + slot) and -1 for its
// other entries, so it has at most `world` contributions; a sum over only
// those spends its lanes' loads on rows instead of absent sources (EP2: 2
// sources, 4 chunks of each in flight per lane on sm90, against 8 sources of
// which 2 live).
//
// Contribution k of the token whose route entries start at `row`: its top-k
// box (row + j), or row + topk when it has no contribution k. Compacted, it
// is the box of the k-th valid entry: the same order, so the same sum.
func.func private @contribution_box(%route: !ep.ptr<i32>, %row: index, %k: index) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c0_i32 = arith.constant 0 : i32
  %world = ep.param_value @world : index
  %topk = ep.param_value @topk : index
  %end = arith.addi %row, %topk : index
  %compact = arith.cmpi ult, %world, %topk : index
  %box = scf.if %compact -> (index) {
    %scan:2 = scf.for %j = %c0 to %topk step %c1 iter_args(%seen = %c0, %found = %end) -> (index, index) {
      %at = arith.addi %row, %j : index
      %entry = ep.load %route[%at] : !ep.ptr<i32>
      %valid = arith.cmpi sge, %entry, %c0_i32 : i32
      %kth = arith.cmpi eq, %seen, %k : index
      %take = arith.andi %valid, %kth : i1
      %next_found = arith.select %take, %at, %found : index
      %one = arith.select %valid, %c1, %c0 : index
      %next_seen = arith.addi %seen, %one : index
      scf.yield %next_seen, %next_found : index, index
    }
    scf.yield %scan#1 : index
  } else {
    %at = arith.addi %row, %k : index
    scf.yield %at : index
  }
  return %box : index
}

// The route entry of a box @contribution_box gave (rank * capacity + slot),
// or -1 when it has none.
func.func private @contribution_entry(%route: !ep.ptr<i32>, %row: index, %box: index) -> i32 {
  %c_1_i32 = arith.constant -1 : i32
  %true = arith.constant true
  %world = ep.param_value @world : index
  %topk = ep.param_value @topk : index
  %end = arith.addi %row, %topk : index
  // Uncompacted, every box exists: no test (it folds away).
  %compact = arith.cmpi ult, %world, %topk : index
  %inside = arith.cmpi ult, %box, %end : index
  %exists = arith.select %compact, %inside, %true : i1
  %entry = scf.if %exists -> (i32) {
    %loaded = ep.load %route[%box] : !ep.ptr<i32>
    scf.yield %loaded : i32
  } else {
    scf.yield %c_1_i32 : i32
  }
  return %entry : i32
}

// A received slot `i` goes back to its origin (scatter's stage 1, the
// low-latency combine): the origin's rank, and the inbox row (box) there:
// the origin token * topk + this rank's destination ordinal, from the slot's
// origin words (dispatch wrote them).
func.func private @origin_rank(%origins: !ep.ptr<i32>, %i: index) -> index {
  %c2 = arith.constant 2 : index
  %max_tokens = ep.param_value @max_tokens : index
  %origin_at = arith.muli %i, %c2 : index
  %origin_i32 = ep.load %origins[%origin_at] : !ep.ptr<i32>
  %origin = arith.index_cast %origin_i32 : i32 to index
  %source = arith.divui %origin, %max_tokens : index
  return %source : index
}
func.func private @inbox_box(%origins: !ep.ptr<i32>, %i: index) -> index {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %topk = ep.param_value @topk : index
  %max_tokens = ep.param_value @max_tokens : index
  %origin_at = arith.muli %i, %c2 : index
  %ordinal_at = arith.addi %origin_at, %c1 : index
  %origin_i32 = ep.load %origins[%origin_at] : !ep.ptr<i32>
  %ordinal_i32 = ep.load %origins[%ordinal_at] : !ep.ptr<i32>
  %origin = arith.index_cast %origin_i32 : i32 to index
  %ordinal = arith.index_cast %ordinal_i32 : i32 to index
  %token = arith.remui %origin, %max_tokens : index
  %box_base = arith.muli %token, %topk : index
  %box = arith.addi %box_base, %ordinal : index
  return %box : index
}

// In a sum's body: is source k of `sources` the last one the warp's first
// item names? The sums meet (or arrive) there, once every source's route
// load is in flight.
func.func private @names_first_items_last_source(%first_item: i1, %k: index, %sources: index) -> i1 {
  %c1 = arith.constant 1 : index
  %last_k = arith.subi %sources, %c1 : index
  %last = arith.cmpi eq, %k, %last_k : index
  %now = arith.andi %first_item, %last : i1
  return %now : i1
}

// In a sum's body, source k of `sources`: the warp's first item meets the
// other ranks (@wait_for_all) once it has named its last source. A sum runs
// every source's body before it reads a row, so the route loads that name
// the sources (this rank's own route, written by its dispatch) are in flight
// across the poll and the block barrier, not one more dependent round trip
// after them.
func.func private @meet_after_last_source(%w: !ep.window, %rank: index, %epoch: i32, %meeting: index,
                                          %first_item: i1, %k: index, %sources: index) {
  %now = func.call @names_first_items_last_source(%first_item, %k, %sources) : (i1, index, index) -> i1
  scf.if %now {
    func.call @wait_for_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
  }
  return
}

// Sums each of this rank's `tokens` tokens into `output` and, when weighted,
// their weights into `out_weights`. Work items are (token, piece) pairs
// (@row_piece_blocks), so a few tokens still spread over the grid, then, when
// weighted, one per token for its weights: an item of their own, not a tail
// of the token's first piece, so a small call reads them on an idle warp in
// flight with the rows instead of one more dependent (at EP2 remote) read
// after them (ncu, EP1, one token: 7.9 -> 7.3 us). Each warp keeps its sums in
// registers with the reads of all of a token's contributions in flight.
//
// The sums wait for the meeting (`epoch`, `meeting`) themselves: every warp
// calls @wait_for_all exactly once (its block barrier needs each of the
// block's warps), in its first item's sum after naming the sources
// (@meet_after_last_source), or at once when it has no item.
func.func private @sum_contributions(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %tokens: index,
                                     %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                                     %weighted: i1, %epoch: i32, %meeting: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %c0_i32 = arith.constant 0 : i32
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %mode = ep.param_value @combine_mode : index
  %quant = ep.param_value @quant : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %gather = arith.cmpi eq, %mode, %c0 : index
  %plain = arith.cmpi eq, %quant, %c0 : index
  %direct = arith.cmpi eq, %quant, %c1 : index
  %blocks = func.call @row_blocks() : () -> index
  // Warps counted block by block: a call of fewer items than warps reads
  // its rows on every SM, not on the first items / warps-per-block of them.
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  // A piece's elements, a multiple of 128 where it is computed, so the
  // sums' offsets are known to be whole 16-byte chunks (vector accesses).
  %chunk_blocks = func.call @row_piece_blocks(%tokens) : (index) -> index
  %chunk = arith.muli %chunk_blocks, %c128 : index
  %chunks = func.call @row_pieces(%tokens, %chunk_blocks) : (index, index) -> index
  %row_items = arith.muli %tokens, %chunks : index
  %weight_items = arith.select %weighted, %tokens, %c0 : index
  %items = arith.addi %row_items, %weight_items : index
  %idle = arith.cmpi uge, %first, %items : index
  scf.if %idle {
    func.call @wait_for_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
  }
  scf.for %item = %first to %items step %stride {
    %first_item = arith.cmpi eq, %item, %first : index
    %is_row = arith.cmpi ult, %item, %row_items : index
    scf.if %is_row {
      %token = arith.divui %item, %chunks : index
      %chunk_index = arith.remui %item, %chunks : index
      %c = arith.muli %chunk_index, %chunk : index
      %row = arith.muli %token, %topk : index
      %out_row = arith.muli %token, %hidden : index
      %out_at = arith.addi %out_row, %c : index
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %chunk : index
      %n = arith.select %short, %left, %chunk : index
      // As many sources as a token can have contributions (@contribution_box),
      // computed here from parameters: a sum's source count is a constant.
      %world = ep.param_value @world : index
      %compact = arith.cmpi ult, %world, %topk : index
      %contributions = arith.select %compact, %world, %topk : index
      scf.if %gather {
        // Contribution k: the expert output its destination staged (route
        // entry rank * capacity + slot).
        ep.warp.sum_rows %output[%out_at], %n, sources(%contributions) : !ep.ptr<!ep.row_elem<"combine_elem">> {
        ^bb0(%k: index):
          %box = func.call @contribution_box(%route, %row, %k) : (!ep.ptr<i32>, index, index) -> index
          %entry = func.call @contribution_entry(%route, %row, %box) : (!ep.ptr<i32>, index, index) -> i32
          %valid = arith.cmpi sge, %entry, %c0_i32 : i32
          %dest = func.call @entry_rank(%entry) : (i32) -> index
          %slot = func.call @entry_slot(%entry) : (i32) -> index
          %src_row = arith.muli %slot, %hidden : index
          %src_at = arith.addi %src_row, %c : index
          %src = ep.peer_ptr %w[%dest] @combine_rows[%src_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
          func.call @meet_after_last_source(%w, %rank, %epoch, %meeting, %first_item, %k, %contributions)
              : (!ep.window, index, i32, index, i1, index, index) -> ()
          ep.source %valid, %src : !ep.ptr<!ep.row_elem<"combine_elem">>
        }
      } else {
        // Contribution k: this rank's inbox row at its top-k box.
        scf.if %plain {
          ep.warp.sum_rows %output[%out_at], %n, sources(%contributions) : !ep.ptr<!ep.row_elem<"combine_elem">> {
          ^bb0(%k: index):
            %box = func.call @contribution_box(%route, %row, %k) : (!ep.ptr<i32>, index, index) -> index
            %entry = func.call @contribution_entry(%route, %row, %box) : (!ep.ptr<i32>, index, index) -> i32
            %valid = arith.cmpi sge, %entry, %c0_i32 : i32
            %box_row = arith.muli %box, %hidden : index
            %box_at = arith.addi %box_row, %c : index
            %src = ep.peer_ptr %w[%rank] @scatter_rows[%box_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
            func.call @meet_after_last_source(%w, %rank, %epoch, %meeting, %first_item, %k, %contributions)
                : (!ep.window, index, i32, index, i1, index, index) -> ()
            ep.source %valid, %src : !ep.ptr<!ep.row_elem<"combine_elem">>
          }
        } else {
          scf.if %direct {
            ep.warp.sum_rows %output[%out_at], %n, sources(%contributions) {format = #ep.fp8<target>}
                : !ep.ptr<!ep.row_elem<"combine_elem">> {
            ^bb0(%k: index):
              %box = func.call @contribution_box(%route, %row, %k) : (!ep.ptr<i32>, index, index) -> index
              %entry = func.call @contribution_entry(%route, %row, %box) : (!ep.ptr<i32>, index, index) -> i32
              %valid = arith.cmpi sge, %entry, %c0_i32 : i32
              %box_row = arith.muli %box, %hidden : index
              %box_at = arith.addi %box_row, %c : index
              %codes = ep.peer_ptr %w[%rank] @scatter_codes[%box_at] : !ep.ptr<i8>
              func.call @meet_after_last_source(%w, %rank, %epoch, %meeting, %first_item, %k, %contributions)
                  : (!ep.window, index, i32, index, i1, index, index) -> ()
              ep.source %valid, %codes : !ep.ptr<i8>
            }
          } else {
            %first_block = arith.divui %c, %c128 : index
            ep.warp.sum_rows %output[%out_at], %n, sources(%contributions)
                {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>} : !ep.ptr<!ep.row_elem<"combine_elem">> {
            ^bb0(%k: index):
              %box = func.call @contribution_box(%route, %row, %k) : (!ep.ptr<i32>, index, index) -> index
              %entry = func.call @contribution_entry(%route, %row, %box) : (!ep.ptr<i32>, index, index) -> i32
              %valid = arith.cmpi sge, %entry, %c0_i32 : i32
              %box_row = arith.muli %box, %hidden : index
              %box_at = arith.addi %box_row, %c : index
              %codes = ep.peer_ptr %w[%rank] @scatter_codes[%box_at] : !ep.ptr<i8>
              %scales_row = arith.muli %box, %blocks : index
              %scales_at = arith.addi %scales_row, %first_block : index
              %scales = ep.peer_ptr %w[%rank] @scatter_scales[%scales_at] : !ep.ptr<f32>
              func.call @meet_after_last_source(%w, %rank, %epoch, %meeting, %first_item, %k, %contributions)
                  : (!ep.window, index, i32, index, i1, index, index) -> ()
              ep.source %valid, %codes scales %scales : !ep.ptr<i8>, !ep.ptr<f32>
            }
          }
        }
      }
    } else {
      // A token's weights: the same sum of its top-k rows.
      %token = arith.subi %item, %row_items : index
      %row = arith.muli %token, %topk : index
      ep.warp.sum_rows %out_weights[%row], %topk, sources(%topk) : !ep.ptr<f32> {
      ^bb0(%j: index):
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        %dest = func.call @entry_rank(%entry) : (i32) -> index
        %slot = func.call @entry_slot(%entry) : (i32) -> index
        %staged_at = arith.muli %slot, %topk : index
        %staged = ep.peer_ptr %w[%dest] @combine_weights[%staged_at] : !ep.ptr<f32>
        %box_at = arith.muli %box, %topk : index
        %inbox = ep.peer_ptr %w[%rank] @scatter_weights[%box_at] : !ep.ptr<f32>
        %src = arith.select %gather, %staged, %inbox : !ep.ptr<f32>
        func.call @meet_after_last_source(%w, %rank, %epoch, %meeting, %first_item, %j, %topk)
            : (!ep.window, index, i32, index, i1, index, index) -> ()
        ep.source %valid, %src : !ep.ptr<f32>
      }
    }
  }
  return
}
