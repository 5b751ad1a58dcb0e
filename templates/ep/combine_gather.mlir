// ep/combine_gather: every rank stages its expert outputs (and weights) in its
// window; once all ranks have, each origin token reads its contributions from
// its destinations (ep/combine).
ep.include "ep/common"
ep.include "ep/sync"
ep.include "ep/combine"
ep.include "ep/std_moe"

// staged != 0: the expert outputs were written into @combine_rows in place
// (EpDispatchCombineOp::combine_input()), so only the weights are copied.
// unpacks != 0 (std-MoE, intranode): they are first summed here from the
// standard-MoE layout's `expert_out` into @combine_rows (@unpack_received),
// and staged is set. One kernel instead of an unpack kernel and this one: a
// launch less per std-MoE combine.
// phases (@phase_send, @phase_receive): the send half stages and arrives;
// the receive half sums (its warps wait for every rank's arrival).
ep.kernel @ep_combine_gather(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                             %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                             %route: !ep.ptr<i32>, %tokens: index, %rank: index, %has_weights: index,
                             %staged: index, %expert_out: !ep.ptr<bf16>, %unpacks: index, %phases: index,
                             %token_count: !ep.ptr<i32>, %count_on_device: index,
                             %w: !ep.window)
    warps_per_block(4) when(@combine_mode eq "gather" and @low_latency eq 0 and @entry_combine eq 0) {
  // The epoch and the received count are read before the stopped check, all three loads in flight at once.
  %c0 = arith.constant 0 : index
  %epoch_word = ep.constant_value @state_epoch : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %epoch = ep.atomic_load %state[%epoch_word] scope(agent) order(relaxed) : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  %send_phase = ep.constant_value @phase_send : index
  %sending = func.call @runs_phase(%phases, %send_phase) : (index, index) -> i1
  // The weights row this warp stages first, on its way while the state words
  // come back (the caller's input, which has at least capacity rows).
  %topk = ep.param_value @topk : index
  %capacity = ep.param_value @capacity : index
  // Slots are taken block by block, so a small call's rows are staged on as
  // many SMs as there are rows (not a block's worth of them on one SM).
  %first_slot = func.call @block_major_warp_index() : () -> index
  %weighted = arith.cmpi ne, %has_weights, %c0 : index
  %row_exists = arith.cmpi ult, %first_slot, %capacity : index
  %weighted_row = arith.andi %weighted, %row_exists : i1
  %prefetches = arith.andi %weighted_row, %sending : i1
  scf.if %prefetches {
    %first_row = arith.muli %first_slot, %topk : index
    ep.prefetch %in_weights[%first_row] : !ep.ptr<f32>
  }
  %std_moe = ep.param_value @std_moe : i1
  %unpack_asked = arith.cmpi ne, %unpacks, %c0 : index
  %unpacking = arith.andi %std_moe, %unpack_asked : i1
  scf.if %answered {
    %hidden = ep.param_value @hidden : index
    %arrivals = ep.constant_value @state_combine_arrivals : index
    %combine_meeting = ep.constant_value @meeting_combine : index
    %total = arith.index_cast %total_i32 : i32 to index
    %stride = ep.global_warp_count : index

    // A receive half stages nothing (its send half did) and does not arrive.
    %unpacks_here = arith.andi %unpacking, %sending : i1
    scf.if %unpacks_here {
      %received = ep.peer_ptr %w[%rank] @combine_rows[%c0] : !ep.ptr<!ep.row_elem<"combine_elem">>
      func.call @unpack_received(%expert_out, %received, %w, %rank, %total)
          : (!ep.ptr<bf16>, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.window, index, index) -> ()
    }
    %copy_rows = arith.cmpi eq, %staged, %c0 : index
    %staged_end = arith.select %sending, %total, %c0 : index
    scf.for %i = %first_slot to %staged_end step %stride {
      %at = arith.muli %i, %hidden : index
      scf.if %copy_rows {
        %rows = ep.peer_ptr %w[%rank] @combine_rows[%at] : !ep.ptr<!ep.row_elem<"combine_elem">>
        ep.warp.copy_row %input[%at], %rows[%c0], %hidden
            : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
      }
      scf.if %weighted {
        %weights_at = arith.muli %i, %topk : index
        %staged_weights = ep.peer_ptr %w[%rank] @combine_weights[%weights_at] : !ep.ptr<f32>
        ep.warp.copy_row %in_weights[%weights_at], %staged_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
      }
    }
    scf.if %sending {
      %last = func.call @arrive(%w, %rank, %epoch, %arrivals, %combine_meeting)
          : (!ep.window, index, i32, index, index) -> i1
    }
    %receive_phase = ep.constant_value @phase_receive : index
    %receiving = func.call @runs_phase(%phases, %receive_phase) : (index, index) -> i1
    %moved = func.call @call_tokens(%tokens, %token_count, %count_on_device) : (index, !ep.ptr<i32>, index) -> index
    scf.if %receiving {
      func.call @sum_contributions(%w, %rank, %route, %moved, %output, %out_weights, %weighted, %epoch,
                                   %combine_meeting)
          : (!ep.window, index, !ep.ptr<i32>, index, !ep.ptr<!ep.row_elem<"combine_elem">>, !ep.ptr<f32>, i1, i32,
             index) -> ()
    }
  }
}
