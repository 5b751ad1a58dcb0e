// ep/combine_scatter: stage 1 writes each received token's expert output
// into its origin's inbox (row token * topk + destination ordinal),
// compressed to the target's fp8 under quant; once all ranks have, each rank
// sums its tokens from its inbox (ep/combine).
ep.include "ep/common"
ep.include "ep/sync"
ep.include "ep/combine"
ep.include "ep/std_moe"

// Stage 1's copy of `count` elements from `src` into an origin's inbox:
// the rows, or under quant the target's fp8 codes (and blockwise scales).
// Every pointer is a 16-byte aligned piece start (hidden is a multiple of 8,
// a piece of 128), so the copies are vector accesses; a whole row's call
// passes the constant hidden, so the inlined loops keep their constant trip
// count (a piece count at every size made fp8 direct 2% slower at 8192
// tokens).
func.func private @push_row(%src: !ep.ptr<!ep.row_elem<"combine_elem">>, %rows: !ep.ptr<!ep.row_elem<"combine_elem">>,
                            %codes: !ep.ptr<i8>, %scales: !ep.ptr<f32>, %count: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %quant = ep.param_value @quant : index
  %direct = arith.cmpi eq, %quant, %c1 : index
  %blockwise = arith.cmpi eq, %quant, %c2 : index
  scf.if %direct {
    ep.warp.quantize %src[%c0], %codes[%c0], %count {format = #ep.fp8<target>}
        : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<i8>
  } else {
    scf.if %blockwise {
      ep.warp.quantize %src[%c0], %codes[%c0], %count scales %scales[%c0]
          {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
          : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<i8>, !ep.ptr<f32>
    } else {
      ep.warp.copy_row %src[%c0], %rows[%c0], %count
          : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
    }
  }
  return
}

// Under quant, std-MoE's stage 1 first sums each of its warp's items
// (@unpack_piece) into `staging` (the slot's row, the item's piece), then
// quantizes them from there: all of a warp's sums, one warp barrier, all of
// its quantized pieces, so the loads of each phase stream as two kernels'
// would (a sum, a store and a reload per piece, in turn, made 8192 tokens
// 1.4% slower than an unpack kernel launched first).
func.func private @unpack_items(%expert_out: !ep.ptr<bf16>, %staging: !ep.ptr<!ep.row_elem<"combine_elem">>,
                                %w: !ep.window, %rank: index, %begin: index, %end: index, %pieces: index,
                                %piece_blocks: index) {
  %c1 = arith.constant 1 : index
  %c128 = arith.constant 128 : index
  %hidden = ep.param_value @hidden : index
  %piece = arith.muli %piece_blocks, %c128 : index
  scf.for %item = %begin to %end step %c1 {
    %i = arith.divui %item, %pieces : index
    %piece_index = arith.remui %item, %pieces : index
    %first_block = arith.muli %piece_index, %piece_blocks : index
    %c = arith.muli %first_block, %c128 : index
    %left = arith.subi %hidden, %c : index
    %short = arith.cmpi ult, %left, %piece : index
    %n = arith.select %short, %left, %piece : index
    %row_at = arith.muli %i, %hidden : index
    %at = arith.addi %row_at, %c : index
    %dst = ep.ptr_add %staging, %at : !ep.ptr<!ep.row_elem<"combine_elem">>
    func.call @unpack_piece(%expert_out, %dst, %w, %rank, %i, %first_block, %n)
        : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index, index, index) -> ()
  }
  // The quantizer's lanes read the pieces with their own mapping.
  ep.warp_barrier
  return
}

// unpacks != 0 (std-MoE, intranode): stage 1 sums each received token's
// local experts' rows in the standard-MoE layout's `expert_out`
// (@unpack_piece) itself, instead of reading `input` rows an unpack kernel
// wrote: a launch less. Without quant the sum goes straight into the
// origin's inbox; under quant the warp sums its pieces into `input` (then
// this rank's staging rows) and quantizes them from there (@unpack_items).
// phases (@phase_send, @phase_receive): the send half pushes into the
// origins' inboxes and arrives; the receive half sums this rank's inbox.
ep.kernel @ep_combine_scatter(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                              %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                              %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                              %expert_out: !ep.ptr<bf16>, %unpacks: index, %phases: index,
                              %token_count: !ep.ptr<i32>, %count_on_device: index, %w: !ep.window)
    warps_per_block(4)
    when(@combine_mode eq "scatter" and @low_latency eq 0) {
  // The epoch and the received count are read before the stopped check, all three loads in flight at once.
  %c0 = arith.constant 0 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  %send_phase = ep.constant_value @phase_send : index
  %receive_phase = ep.constant_value @phase_receive : index
  %sending = func.call @runs_phase(%phases, %send_phase) : (index, index) -> i1
  %receiving = func.call @runs_phase(%phases, %receive_phase) : (index, index) -> i1
  scf.if %answered {
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %true = arith.constant true
    %hidden = ep.param_value @hidden : index
    %topk = ep.param_value @topk : index
    %arrivals = ep.constant_value @state_combine_arrivals : index
    %combine_meeting = ep.constant_value @meeting_combine : index
    %blocks = func.call @row_blocks() : () -> index
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %total = arith.index_cast %total_i32 : i32 to index
    scf.if %sending {
      %origins = ep.peer_ptr %w[%rank] @recv_origin[%c0] : !ep.ptr<i32>
      // Work items are (slot, piece) pairs (@row_piece_blocks: one piece per
      // row once the slots fill the grid, more when they do not, so a small
      // call's rows cross on many warps, each one round of loads, instead of
      // one warp per row). Each warp takes a contiguous run of items, so at
      // any moment the grid works on slots spread over the whole range:
      // dispatch hands out slots in runs per sender warp, and a source's runs
      // cluster in time (a rank reserves on itself faster than its peers
      // can), so a cyclic split would have every warp writing to the same
      // origin at once. A slot's weights go with its first piece.
      %piece_blocks = func.call @row_piece_blocks(%total) : (index) -> index
      %piece = arith.muli %piece_blocks, %c128 : index
      %pieces = func.call @row_pieces(%total, %piece_blocks) : (index, index) -> index
      %items = arith.muli %total, %pieces : index
      %whole_rows = arith.cmpi eq, %pieces, %c1 : index
      %std_moe = ep.param_value @std_moe : i1
      %quant = ep.param_value @quant : index
      %plain = arith.cmpi eq, %quant, %c0 : index
      %unpack_asked = arith.cmpi ne, %unpacks, %c0 : index
      %unpacking = arith.andi %std_moe, %unpack_asked : i1
      %unpacking_into_inbox = arith.andi %unpacking, %plain : i1
      %run_length = func.call @warp_run_length(%items) : (index) -> index
      %items_begin = func.call @warp_run(%items, %run_length) : (index, index) -> index
      %items_end = func.call @warp_run_end(%items, %run_length) : (index, index) -> index
      %unpacking_staged = arith.xori %unpacking, %unpacking_into_inbox : i1
      scf.if %unpacking_staged {
        func.call @unpack_items(%expert_out, %input, %w, %rank, %items_begin, %items_end, %pieces, %piece_blocks)
            : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index, index, index, index) -> ()
      }

      // A piece of a split row (a small call's) is plainly copied around the
      // origin loads that name its box: its loads are in flight while those
      // come back, not issued after them (@inbox_box).
      %pushes_rows = arith.xori %unpacking_into_inbox, %true : i1
      %plain_push = arith.andi %plain, %pushes_rows : i1
      %split_rows = arith.xori %whole_rows, %true : i1
      %held = arith.andi %plain_push, %split_rows : i1
      scf.for %item = %items_begin to %items_end step %c1 {
        %i = arith.divui %item, %pieces : index
        %piece_index = arith.remui %item, %pieces : index
        %c = arith.muli %piece_index, %piece : index
        %left = arith.subi %hidden, %c : index
        %short = arith.cmpi ult, %left, %piece : index
        %n = arith.select %short, %left, %piece : index
        %src_row = arith.muli %i, %hidden : index
        %src_at = arith.addi %src_row, %c : index
        %src = ep.ptr_add %input, %src_at : !ep.ptr<!ep.row_elem<"combine_elem">>
        %box, %source = scf.if %held -> (index, index) {
          %held_box, %held_source = ep.warp.copy_row_around %src[%c0], %n
              : !ep.ptr<!ep.row_elem<"combine_elem">> -> index, index {
            %b = func.call @inbox_box(%origins, %i) : (!ep.ptr<i32>, index) -> index
            %o = func.call @origin_rank(%origins, %i) : (!ep.ptr<i32>, index) -> index
            %o_off = func.call @off_node(%rank, %o) : (index, index) -> i1
            %o_on = arith.xori %o_off, %true : i1
            %b_row = arith.muli %b, %hidden : index
            %b_at = arith.addi %b_row, %c : index
            %b_rows = ep.peer_ptr %w[%o] @scatter_rows[%b_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
            ep.copy_to %o_on, %b_rows : !ep.ptr<!ep.row_elem<"combine_elem">> yield %b, %o : index, index
          }
          scf.yield %held_box, %held_source : index, index
        } else {
          %b = func.call @inbox_box(%origins, %i) : (!ep.ptr<i32>, index) -> index
          %o = func.call @origin_rank(%origins, %i) : (!ep.ptr<i32>, index) -> index
          scf.yield %b, %o : index, index
        }
        %dst_row = arith.muli %box, %hidden : index
        %dst_at = arith.addi %dst_row, %c : index
        // An off-node origin's rows go back through the internode transfer
        // (ep_internode_return_pack), not into its stand-in window here.
        %off = func.call @off_node(%rank, %source) : (index, index) -> i1
        %on_node = arith.xori %off, %true : i1
        scf.if %on_node {
          %rows = ep.peer_ptr %w[%source] @scatter_rows[%dst_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
          %codes = ep.peer_ptr %w[%source] @scatter_codes[%dst_at] : !ep.ptr<i8>
          %box_scales = arith.muli %box, %blocks : index
          %first_block = arith.muli %piece_index, %piece_blocks : index
          %scales_at = arith.addi %box_scales, %first_block : index
          %scales = ep.peer_ptr %w[%source] @scatter_scales[%scales_at] : !ep.ptr<f32>
          %not_held = arith.xori %held, %true : i1
          scf.if %not_held {
            scf.if %unpacking_into_inbox {
              func.call @unpack_piece(%expert_out, %rows, %w, %rank, %i, %first_block, %n)
                  : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index, index, index) -> ()
            } else {
              scf.if %whole_rows {
                func.call @push_row(%src, %rows, %codes, %scales, %hidden)
                    : (!ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<i8>, !ep.ptr<f32>, index) -> ()
              } else {
                func.call @push_row(%src, %rows, %codes, %scales, %n)
                    : (!ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<i8>, !ep.ptr<f32>, index) -> ()
              }
            }
          }
          %first_piece = arith.cmpi eq, %piece_index, %c0 : index
          %weights_here = arith.andi %weighted, %first_piece : i1
          scf.if %weights_here {
            %weights_at = arith.muli %i, %topk : index
            %box_weights_at = arith.muli %box, %topk : index
            %box_weights = ep.peer_ptr %w[%source] @scatter_weights[%box_weights_at] : !ep.ptr<f32>
            ep.warp.copy_row %in_weights[%weights_at], %box_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          }
        }
      }
      %last = func.call @arrive(%w, %rank, %epoch, %arrivals, %combine_meeting)
          : (!ep.window, index, i32, index, index) -> i1
    }
    scf.if %receiving {
      %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
      func.call @sum_contributions(%w, %rank, %route, %moved, %output, %out_weights, %weighted, %epoch,
                                   %combine_meeting)
          : (!ep.window, index, !ep.ptr<i32>, index, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<f32>, i1, i32,
             index) -> ()
    }
  }
}
