// ep/combine_low_latency: the combine of an op built for small calls
// (@low_latency, intranode, no quant, no std-MoE). Each expert output of a
// token from another rank goes straight from `input` into its origin's
// flagged inbox (@flagged_rows: a flagged row per (token, destination ordinal),
// its data and the dispatch's epoch in every 16-byte line), and each origin
// sums its tokens as their lines arrive, reading its own experts' outputs
// where they lie: no staging copy, no meeting before the sums, no read across
// the link after one. The result is gather's and scatter's, bit for bit: the
// same contributions, summed in the same order (ep/combine).
//
// Why one epoch flag is enough: a rank pushes into an inbox for call i + 1
// only after its dispatch i + 1 met the owner's, which the owner reaches only
// after its combine i has read the inbox; every dispatch has a new epoch, so
// a line of call i never passes for one of call i + 1. reset() clears the
// inboxes with the epochs.
//
// The combine meeting stays, off the sums' path: a rank arrives once its
// warps have read what a peer's next dispatch overwrites (the slots' origin
// words, the received weights), and waits for all arrivals only at the end
// of the kernel, so its next dispatch writes into no peer still reading its
// received rows.
ep.include "ep/common"
ep.include "ep/sync"
ep.include "ep/combine"

// Line positions in the inboxes, computed where they are used (a
// function's result would hide from ep-lower-warp-ops that a flagged row
// starts on a 16-byte line): element c of the flagged row of `box` is at
// (box * hidden + c) * 2 in @flagged_rows; the flagged weights of `box` at
// box * weights_stride in @flagged_weights, top-k f32 padded to a
// multiple of 4 (a constant of the specialization).

// Sends each received slot's piece of another rank's token (and, with its
// first piece, the slot's weights, of every token) to its origin's inbox,
// flagged with `epoch`. Work items are (slot, piece)
// pairs (@row_piece_blocks), counted block by block, so a small call's rows
// leave from many SMs at once.
func.func private @push_flagged(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                                %weighted: i1, %total: index, %epoch: i32, %rank: index, %w: !ep.window) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %topk_up = arith.addi %topk, %c3 : index
  %quads = arith.divui %topk_up, %c4 : index
  %padded = arith.muli %quads, %c4 : index
  %weights_stride = arith.muli %padded, %c2 : index
  %origins = ep.peer_ptr %w[%rank] @recv_origin[%c0] : !ep.ptr<i32>
  %piece_blocks = func.call @row_piece_blocks(%total) : (index) -> index
  %piece = arith.muli %piece_blocks, %c128 : index
  %pieces = func.call @row_pieces(%total, %piece_blocks) : (index, index) -> index
  %items = arith.muli %total, %pieces : index
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  scf.for %item = %first to %items step %stride {
    %i = arith.divui %item, %pieces : index
    %piece_index = arith.remui %item, %pieces : index
    %c = arith.muli %piece_index, %piece : index
    %left = arith.subi %hidden, %c : index
    %short = arith.cmpi ult, %left, %piece : index
    %n = arith.select %short, %left, %piece : index
    %src_row = arith.muli %i, %hidden : index
    %src_at = arith.addi %src_row, %c : index
    %src = ep.ptr_add %input, %src_at : !ep.ptr<!ep.row_elem<"combine_elem">>
    // The piece's loads are in flight while the slot's origin words, which
    // name where it goes, come back.
    %box, %origin = ep.warp.copy_row_around %src[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> index, index {
      %b = func.call @inbox_box(%origins, %i) : (!ep.ptr<i32>, index) -> index
      %o = func.call @origin_rank(%origins, %i) : (!ep.ptr<i32>, index) -> index
      %b_row = arith.muli %b, %hidden : index
      %b_at = arith.addi %b_row, %c : index
      %lines_at = arith.muli %b_at, %c2 : index
      %lines = ep.peer_ptr %w[%o] @flagged_rows[%lines_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
      // A contribution of this rank's own experts stays where it lies: the
      // sum reads it from `input`.
      %remote = arith.cmpi ne, %o, %rank : index
      ep.copy_to %remote, %lines flagged(%epoch) : !ep.ptr<!ep.row_elem<"combine_elem">> yield %b, %o : index, index
    }
    %first_piece = arith.cmpi eq, %piece_index, %c0 : index
    %weights_here = arith.andi %weighted, %first_piece : i1
    scf.if %weights_here {
      %weights_at = arith.muli %i, %topk : index
      %box_weights_at = arith.muli %box, %weights_stride : index
      %box_weights = ep.peer_ptr %w[%origin] @flagged_weights[%box_weights_at] : !ep.ptr<f32>
      ep.warp.copy_row %in_weights[%weights_at], %box_weights[%c0], %topk flagged(%epoch) : !ep.ptr<f32> -> !ep.ptr<f32>
    }
  }
  return
}

// The index of a block's last warp (blocks are the launch's warps / blocks).
func.func private @last_warp_of_block() -> index {
  %c1 = arith.constant 1 : index
  %warps = ep.global_warp_count : index
  %blocks = ep.block_count : index
  %per_block = arith.divui %warps, %blocks : index
  %last = arith.subi %per_block, %c1 : index
  return %last : index
}

// A block's arrival at the combine meeting, counted by its last warp: work
// items go to the blocks' first warps first (@block_major_warp_index), so at
// a small call the counting atomic and the last block's fence run on a warp
// with nothing to sum.
func.func private @arrive_at_combine(%w: !ep.window, %rank: index, %epoch: i32) {
  %arrivals = ep.constant_value @state_combine_arrivals : index
  %meeting = ep.constant_value @meeting_combine : index
  %leader = func.call @last_warp_of_block() : () -> index
  %raised = func.call @arrive_led_by(%w, %rank, %epoch, %arrivals, %meeting, %leader)
      : (!ep.window, index, i32, index, index, index) -> i1
  return
}

// In a flagged sum's body, source k of `sources`: the warp's first item
// arrives at the combine meeting (@arrive_at_combine) once it has named its
// last source, so the route loads that name the sources are in flight across
// the arrival's block barrier instead of issued after it. Every warp arrives
// exactly once (the barrier needs each of its block's warps): here, or at
// once when it has no item.
func.func private @arrive_after_last_source(%w: !ep.window, %rank: index, %epoch: i32, %first_item: i1, %k: index,
                                            %sources: index) {
  %now = func.call @names_first_items_last_source(%first_item, %k, %sources) : (i1, index, index) -> i1
  scf.if %now {
    func.call @arrive_at_combine(%w, %rank, %epoch) : (!ep.window, index, i32) -> ()
  }
  return
}

// Sums each of this rank's `tokens` tokens from its inbox into `output` (and,
// when weighted, their weights into `out_weights`) as ep/combine's
// @sum_contributions does: (token, piece) items, then one per token for its
// weights; the same sources in the same order. Each source's lines are
// awaited until they carry `epoch`, bounded by the op's peer timeout. The
// warps arrive at the combine meeting on the way (@arrive_after_last_source);
// each block's last warp then waits for every rank's arrival.
func.func private @sum_flagged(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %tokens: index,
                               %input: !ep.ptr<!ep.row_elem<"combine_elem">>,
                               %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                               %weighted: i1, %epoch: i32) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %c0_i32 = arith.constant 0 : i32
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %topk_up = arith.addi %topk, %c3 : index
  %quads = arith.divui %topk_up, %c4 : index
  %padded = arith.muli %quads, %c4 : index
  %weights_stride = arith.muli %padded, %c2 : index
  %world = ep.param_value @world : index
  %error_word = ep.constant_value @state_error : index
  %timeout = ep.constant_value @error_peer_timeout : i32
  %limit_word = ep.constant_value @state_peer_timeout_ms : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %limit = ep.load %state[%limit_word] : !ep.ptr<i32>
  %compact = arith.cmpi ult, %world, %topk : index
  %contributions = arith.select %compact, %world, %topk : index
  %meeting = ep.constant_value @meeting_combine : index
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  %chunk_blocks = func.call @row_piece_blocks(%tokens) : (index) -> index
  %chunk = arith.muli %chunk_blocks, %c128 : index
  %chunks = func.call @row_pieces(%tokens, %chunk_blocks) : (index, index) -> index
  %row_items = arith.muli %tokens, %chunks : index
  %weight_items = arith.select %weighted, %tokens, %c0 : index
  %items = arith.addi %row_items, %weight_items : index
  %idle = arith.cmpi uge, %first, %items : index
  scf.if %idle {
    func.call @arrive_at_combine(%w, %rank, %epoch) : (!ep.window, index, i32) -> ()
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
      ep.warp.sum_rows %output[%out_at], %n, sources(%contributions) flagged(%epoch)
          error(%state[%error_word], %timeout : !ep.ptr<i32>) timeout_ms(%limit)
          : !ep.ptr<!ep.row_elem<"combine_elem">> {
      ^bb0(%k: index):
        %box = func.call @contribution_box(%route, %row, %k) : (!ep.ptr<i32>, index, index) -> index
        %entry = func.call @contribution_entry(%route, %row, %box) : (!ep.ptr<i32>, index, index) -> i32
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        %box_row = arith.muli %box, %hidden : index
        %box_at = arith.addi %box_row, %c : index
        %lines_at = arith.muli %box_at, %c2 : index
        %lines = ep.peer_ptr %w[%rank] @flagged_rows[%lines_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
        // This rank's own contribution (route entry rank * capacity + slot):
        // its expert output in `input`, never pushed.
        %dest = func.call @entry_rank(%entry) : (i32) -> index
        %slot = func.call @entry_slot(%entry) : (i32) -> index
        %own = arith.cmpi eq, %dest, %rank : index
        %slot_row = arith.muli %slot, %hidden : index
        %slot_at = arith.addi %slot_row, %c : index
        %in_place = ep.ptr_add %input, %slot_at : !ep.ptr<!ep.row_elem<"combine_elem">>
        %source_row = arith.select %own, %in_place, %lines : !ep.ptr<!ep.row_elem<"combine_elem">>
        func.call @arrive_after_last_source(%w, %rank, %epoch, %first_item, %k, %contributions)
            : (!ep.window, index, i32, i1, index, index) -> ()
        ep.source %valid, %source_row unflagged(%own) : !ep.ptr<!ep.row_elem<"combine_elem">>
      }
    } else {
      // A token's weights: the sum of its destinations' rows of top-k
      // weights. Its route entries name its destinations first, then -1s, so
      // entries past min(world, top-k) never count: the sum takes that many
      // sources (at EP2 two, not eight mostly absent ones), the same ones in
      // the same order.
      %token = arith.subi %item, %row_items : index
      %row = arith.muli %token, %topk : index
      ep.warp.sum_rows %out_weights[%row], %topk, sources(%contributions) flagged(%epoch)
          error(%state[%error_word], %timeout : !ep.ptr<i32>) timeout_ms(%limit) : !ep.ptr<f32> {
      ^bb0(%j: index):
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        %lines_at = arith.muli %box, %weights_stride : index
        %lines = ep.peer_ptr %w[%rank] @flagged_weights[%lines_at] : !ep.ptr<f32>
        func.call @arrive_after_last_source(%w, %rank, %epoch, %first_item, %j, %contributions)
            : (!ep.window, index, i32, i1, index, index) -> ()
        ep.source %valid, %lines : !ep.ptr<f32>
      }
    }
  }
  // The last warp of each block, which counted it, waits for every rank's
  // arrival: usually a warp with nothing to sum, its wait overlapping the
  // others' sums.
  %warp = ep.warp_index : index
  %leader = func.call @last_warp_of_block() : () -> index
  %lead = arith.cmpi eq, %warp, %leader : index
  scf.if %lead {
    func.call @poll_all(%w, %rank, %epoch, %meeting) : (!ep.window, index, i32, index) -> ()
  }
  return
}

// phases (@phase_send, @phase_receive): the send half pushes; the receive
// half sums as the lines arrive, and arrives at the combine meeting on the
// way (after the send half's reads of the received slots, by stream order).
ep.kernel @ep_combine_low_latency(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                                  %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                                  %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                                  %phases: index, %token_count: !ep.ptr<i32>, %count_on_device: index,
                                  %w: !ep.window) warps_per_block(4) when(@low_latency) {
  // The epoch and the received count are read before the stopped check, all three loads in flight at once.
  %c0 = arith.constant 0 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %total = arith.index_cast %total_i32 : i32 to index
    %send_phase = ep.constant_value @phase_send : index
    %receive_phase = ep.constant_value @phase_receive : index
    %sending = func.call @runs_phase(%phases, %send_phase) : (index, index) -> i1
    %receiving = func.call @runs_phase(%phases, %receive_phase) : (index, index) -> i1
    scf.if %sending {
      func.call @push_flagged(%input, %in_weights, %weighted, %total, %epoch, %rank, %w)
          : (!ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<f32>, i1, index, i32, index, !ep.window) -> ()
    }
    scf.if %receiving {
      %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
      func.call @sum_flagged(%w, %rank, %route, %moved, %input, %output, %out_weights, %weighted, %epoch)
          : (!ep.window, index, !ep.ptr<i32>, index, !ep.ptr<!ep.row_elem<"combine_elem">>,
             !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<f32>, i1, i32) -> ()
    }
  }
}
