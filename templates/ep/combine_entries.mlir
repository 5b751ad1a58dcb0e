// ep/combine_entries: the standard-MoE combine of an op built with
// entry_combine (DeepEP's low-latency combine). Each (token, k) expert output
// goes back to its origin on its own, and the origin sums its token's rows
// weighted by its own top-k weights, in top-k order: acc = +0.0, then
// fma(row_k, weight_k, acc) for each k that names an expert, rounded once to
// bf16. No rank sums its experts' rows first, so the result is DeepEP's bits
// whatever the world.
//
// The send half stages each packed row this rank's experts produced into
// @moe_entry_rows (or finds it there: std_moe_combine_input()) and arrives
// at the combine meeting; the receive half waits for every rank's arrival,
// then reads each row where its expert's rank staged it: that rank's slot of
// the token (the origin's route), the entry's packed position there (that
// rank's @moe_slots, written by its pack), and the row at that position.
//
// Why no second meeting: a rank writes @moe_entry_rows and @moe_slots for
// call i + 1 only after its dispatch i + 1 met every rank's, which a rank
// reaches only after its combine i has read them.
ep.include "ep/common"
ep.include "ep/sync"
ep.include "ep/std_moe"

// The first top-k entry of the token whose indices start at `row` that
// names the expert entry k names (k itself unless a repeat): the entry the
// pack gave the row (ep/std_moe packs an expert once per token).
func.func private @first_entry_naming(%indices: !ep.ptr<i32>, %row: index, %k: index) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %at = arith.addi %row, %k : index
  %expert = ep.load %indices[%at] : !ep.ptr<i32>
  %found = scf.for %j = %c0 to %k step %c1 iter_args(%first = %k) -> (index) {
    %earlier_at = arith.addi %row, %j : index
    %earlier = ep.load %indices[%earlier_at] : !ep.ptr<i32>
    %match = arith.cmpi eq, %earlier, %expert : i32
    %unset = arith.cmpi eq, %first, %k : index
    %take = arith.andi %match, %unset : i1
    %next = arith.select %take, %j, %first : index
    scf.yield %next : index
  }
  return %found : index
}

// The slot rank `owner` gave the token whose route entries start at `row`
// (its entry there: owner * capacity + slot).
func.func private @slot_on(%route: !ep.ptr<i32>, %row: index, %owner: index) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c0_i32 = arith.constant 0 : i32
  %topk = ep.param_value @topk : index
  %slot = scf.for %j = %c0 to %topk step %c1 iter_args(%found = %c0) -> (index) {
    %at = arith.addi %row, %j : index
    %entry = ep.load %route[%at] : !ep.ptr<i32>
    %valid = arith.cmpi sge, %entry, %c0_i32 : i32
    %dest = func.call @entry_rank(%entry) : (i32) -> index
    %here = arith.cmpi eq, %dest, %owner : index
    %match = arith.andi %valid, %here : i1
    %entry_slot = func.call @entry_slot(%entry) : (i32) -> index
    %next = arith.select %match, %entry_slot, %found : index
    scf.yield %next : index
  }
  return %slot : index
}

// The send half's copy: each of the `total` received tokens' entries that
// this rank packed (its expert is here, named first in the token's top-k),
// from `expert_out` into @moe_entry_rows at the same packed row, a warp per
// entry on warps counted block by block.
func.func private @stage_entries(%expert_out: !ep.ptr<bf16>, %w: !ep.window, %rank: index, %total: index) {
  %c0 = arith.constant 0 : index
  %c0_i32 = arith.constant 0 : i32
  %true = arith.constant true
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  %entries = arith.muli %total, %topk : index
  scf.for %at = %first to %entries step %stride {
    %i = arith.divui %at, %topk : index
    %j = arith.remui %at, %topk : index
    %row = arith.muli %i, %topk : index
    %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
    %named = arith.cmpi sge, %expert_i32, %c0_i32 : i32
    %known = arith.select %named, %expert_i32, %c0_i32 : i32
    %expert = arith.index_cast %known : i32 to index
    %owner = arith.divui %expert, %epr : index
    %here = arith.cmpi eq, %owner, %rank : index
    %repeat = func.call @expert_repeats_earlier(%indices, %row, %j) : (!ep.ptr<i32>, index, index) -> i1
    %fresh = arith.xori %repeat, %true : i1
    %mine = arith.andi %named, %here : i1
    %packed = arith.andi %mine, %fresh : i1
    scf.if %packed {
      %position_i32 = ep.load %slots[%at] : !ep.ptr<i32>
      %position = arith.index_cast %position_i32 : i32 to index
      %packed_row = func.call @expert_row(%expert, %position) : (index, index) -> index
      %packed_at = arith.muli %packed_row, %hidden : index
      %staged = ep.peer_ptr %w[%rank] @moe_entry_rows[%packed_at] : !ep.ptr<bf16>
      ep.warp.copy_row %expert_out[%packed_at], %staged[%c0], %hidden : !ep.ptr<bf16> -> !ep.ptr<bf16>
    }
  }
  return
}

// The receive half: each of this rank's `tokens` tokens, by (token, piece)
// items (@row_piece_blocks) on warps counted block by block, is the weighted
// sum of its entries' rows (see the file's comment). Every warp waits for
// the meeting once, first: the packed positions it reads are written by the
// other ranks' packs, which their arrivals follow.
func.func private @sum_entries(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %indices: !ep.ptr<i32>,
                               %weights: !ep.ptr<f32>, %tokens: index,
                               %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %epoch: i32, %meeting: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  %c0_i32 = arith.constant 0 : i32
  %c_1_i32 = arith.constant -1 : i32
  %true = arith.constant true
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  func.call @wait_for_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
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
    ep.warp.sum_rows %output[%out_at], %n, sources(%topk) : !ep.ptr<!ep.row_elem<"combine_elem">> {
    ^bb0(%k: index):
      %at = arith.addi %row, %k : index
      %expert_i32 = ep.load %indices[%at] : !ep.ptr<i32>
      %weight = ep.load %weights[%at] : !ep.ptr<f32>
      // An index outside the experts (not the dispatch's) names no row.
      %outside = func.call @invalid_expert(%expert_i32) : (i32) -> i1
      %inside = arith.xori %outside, %true : i1
      %named = arith.cmpi sge, %expert_i32, %c0_i32 : i32
      %valid = arith.andi %named, %inside : i1
      %known = arith.select %valid, %expert_i32, %c0_i32 : i32
      %expert = arith.index_cast %known : i32 to index
      %owner = arith.divui %expert, %epr : index
      %packed_by = func.call @first_entry_naming(%indices, %row, %k) : (!ep.ptr<i32>, index, index) -> index
      %slot = func.call @slot_on(%route, %row, %owner) : (!ep.ptr<i32>, index, index) -> index
      %slot_row = arith.muli %slot, %topk : index
      %slot_at = arith.addi %slot_row, %packed_by : index
      %position_i32 = scf.if %valid -> (i32) {
        %positions = ep.peer_ptr %w[%owner] @moe_slots[%slot_at] : !ep.ptr<i32>
        %loaded = ep.load %positions[%c0] : !ep.ptr<i32>
        scf.yield %loaded : i32
      } else {
        scf.yield %c_1_i32 : i32
      }
      // -1: the pack gave the entry no row (indices other than the dispatch's).
      %live = arith.cmpi sge, %position_i32, %c0_i32 : i32
      %packed_position = arith.select %live, %position_i32, %c0_i32 : i32
      %position = arith.index_cast %packed_position : i32 to index
      %packed_row = func.call @expert_row(%expert, %position) : (index, index) -> index
      %packed_row_at = arith.muli %packed_row, %hidden : index
      %packed_at = arith.addi %packed_row_at, %c : index
      %src = ep.peer_ptr %w[%owner] @moe_entry_rows[%packed_at] : !ep.ptr<bf16>
      ep.source %live, %src weight %weight : !ep.ptr<bf16>
    }
  }
  return
}

// The arguments are gather's (the op launches either with one argument
// list), plus the origin's top-k `indices`; `in_weights` are the origin's
// top-k weights [tokens, topk] f32, `input`, `out_weights`, `has_weights` and
// `unpacks` are unused. staged != 0: expert_out is @moe_entry_rows itself.
ep.kernel @ep_combine_entries(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                              %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                              %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                              %staged: index, %expert_out: !ep.ptr<bf16>, %unpacks: index, %phases: index,
                              %token_count: !ep.ptr<i32>, %count_on_device: index, %indices: !ep.ptr<i32>,
                              %w: !ep.window)
    warps_per_block(4) when(@entry_combine) {
  %c0 = arith.constant 0 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  %send_phase = ep.constant_value @phase_send : index
  %sending = func.call @runs_phase(%phases, %send_phase) : (index, index) -> i1
  scf.if %answered {
    %arrivals = ep.constant_value @state_combine_arrivals : index
    %meeting = ep.constant_value @meeting_combine : index
    %total = arith.index_cast %total_i32 : i32 to index
    %copies = arith.cmpi eq, %staged, %c0 : index
    %stages = arith.andi %copies, %sending : i1
    scf.if %stages {
      func.call @stage_entries(%expert_out, %w, %rank, %total) : (!ep.ptr<bf16>, !ep.window, index, index) -> ()
    }
    scf.if %sending {
      %last = func.call @arrive(%w, %rank, %epoch, %arrivals, %meeting) : (!ep.window, index, i32, index, index) -> i1
    }
    %receive_phase = ep.constant_value @phase_receive : index
    %receiving = func.call @runs_phase(%phases, %receive_phase) : (index, index) -> i1
    %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
    scf.if %receiving {
      func.call @sum_entries(%w, %rank, %route, %indices, %in_weights, %moved, %output, %epoch, %meeting)
          : (!ep.window, index, !ep.ptr<i32>, !ep.ptr<i32>, !ep.ptr<f32>, index,
             !ep.ptr<!ep.row_elem<"combine_elem">>, i32, index) -> ()
    }
  }
}
