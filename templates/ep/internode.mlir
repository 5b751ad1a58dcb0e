// ep/internode: the kernels of the internode low-latency path (v2_ll,
// docs/EP.md "Internode"). A rank's window table points, for each rank on
// another node, at a local stand-in window of the same layout (the rank's
// "outbox" for that peer), so dispatch and combine address every rank alike:
// a token for an off-node rank lands in its outbox slots, the runtime's
// transport moves each outbox to its rank's inbox (fixed sizes, one transfer
// per peer), and ep_internode_ingest appends the inbox to the received rows.
// Combine mirrors it: ep_internode_return_pack gathers the expert outputs of
// each off-node source's rows in the order they came, the transport carries
// them back, and the origin reads them where its route says (gather: the
// outbox's combine rows; scatter: ep_internode_return_unpack files them into
// its own inbox boxes). Numerics are intranode's: the same sum, in the same
// destination order, rounded once.
//
// Inboxes are per source rank, indexed by world rank (on-node entries stay
// unused): `per_source` rows each, the runtime's fixed slot count.
ep.include "ep/common"
ep.include "ep/buffers"
ep.include "ep/sync"

// Where the route keeps a dispatch's sends to off-node rank `dest`.
func.func private @route_sent_word(%dest: index) -> index {
  %sent = ep.buffer_offset @route_sent : index
  %word = arith.addi %sent, %dest : index
  return %word : index
}

// Closes a dispatch's outboxes, on the last warp of the dispatch (after
// every block of this rank has sent): each off-node rank's count (taken
// from its outbox counter, or the recorded one when replaying) goes into the
// route and into the outbox's total word, which the transfer carries as the
// inbox count; the counter is cleared for the next dispatch.
func.func private @seal_outboxes(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %replaying: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %true = arith.constant true
  %counter_word = ep.constant_value @state_recv_counter : index
  %total_word = ep.constant_value @state_total_recv : index
  %world = ep.param_value @world : index
  %counting = arith.xori %replaying, %true : i1
  scf.for %dest = %c0 to %world step %c1 {
    %off = func.call @off_node(%rank, %dest) : (index, index) -> i1
    scf.if %off {
      %outbox = ep.peer_ptr %w[%dest] @state[%c0] : !ep.ptr<i32>
      %sent_at = func.call @route_sent_word(%dest) : (index) -> index
      %counted = ep.atomic_load %outbox[%counter_word] scope(agent) order(relaxed) : !ep.ptr<i32>
      %recorded = ep.load %route[%sent_at] : !ep.ptr<i32>
      %sent = arith.select %replaying, %recorded, %counted : i32
      scf.if %counting {
        ep.store %sent, %route[%sent_at] : !ep.ptr<i32>
      }
      ep.atomic_store %zero, %outbox[%counter_word] scope(agent) order(relaxed) : !ep.ptr<i32>
      ep.store %sent, %outbox[%total_word] : !ep.ptr<i32>
    }
  }
  return
}

// The rows off-node source `source` sent, as its count word says. The word
// crossed the network from another rank: a count outside [0, per_source] (a
// corrupt or foreign sender) reads as 0 rows, never past the inbox, and sets
// error 4.
func.func private @inbox_count(%counts: !ep.ptr<i32>, %source: index, %per_source: index, %rank: index,
                               %w: !ep.window) -> index {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %error_word = ep.constant_value @state_error : index
  %bad_count = ep.constant_value @error_internode_count : i32
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %per_source_i32 = arith.index_cast %per_source : index to i32
  %count_i32 = ep.load %counts[%source] : !ep.ptr<i32>
  %negative = arith.cmpi slt, %count_i32, %zero : i32
  %beyond = arith.cmpi sgt, %count_i32, %per_source_i32 : i32
  %bad = arith.ori %negative, %beyond : i1
  scf.if %bad {
    ep.atomic_store %bad_count, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
  }
  %kept_i32 = arith.select %bad, %zero, %count_i32 : i32
  %kept = arith.index_cast %kept_i32 : i32 to index
  return %kept : index
}

// The slot of off-node source `source`'s first row: after the node's
// `node_rows` rows and every earlier off-node source's.
func.func private @inbox_base(%counts: !ep.ptr<i32>, %source: index, %node_rows: index, %per_source: index,
                              %rank: index, %w: !ep.window) -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %base = scf.for %s = %c0 to %source step %c1 iter_args(%at = %node_rows) -> (index) {
    %off = func.call @off_node(%rank, %s) : (index, index) -> i1
    %count = func.call @inbox_count(%counts, %s, %per_source, %rank, %w)
        : (!ep.ptr<i32>, index, index, index, !ep.window) -> index
    %more = arith.addi %at, %count : index
    %next = arith.select %off, %more, %at : index
    scf.yield %next : index
  }
  return %base : index
}

// Where off-node source `source`'s rows go: in source order (ep/order), the
// row its route recorded (rows of every lower rank come first, the node's
// included); else after the node's rows and the earlier off-node sources'.
func.func private @source_rows_at(%counts: !ep.ptr<i32>, %source: index, %node_rows: index, %per_source: index,
                                  %rank: index, %w: !ep.window, %route: !ep.ptr<i32>) -> index {
  %source_order = ep.param_value @source_order : i1
  %at = scf.if %source_order -> (index) {
    %first_at = ep.buffer_offset @route_source_first : index
    %word = arith.addi %first_at, %source : index
    %recorded_i32 = ep.load %route[%word] : !ep.ptr<i32>
    %recorded = arith.index_cast %recorded_i32 : i32 to index
    scf.yield %recorded : index
  } else {
    %after_node = func.call @inbox_base(%counts, %source, %node_rows, %per_source, %rank, %w)
        : (!ep.ptr<i32>, index, index, index, index, !ep.window) -> index
    scf.yield %after_node : index
  }
  return %at : index
}

// After the transfer: appends every off-node source's inbox rows (in source
// order, each source's in the order it sent them) to the received rows (in
// receive_order source, puts them where the route says), and publishes the
// new total. Rows past capacity are dropped with error 2, as
// intranode.
ep.kernel @ep_internode_ingest(%counts: !ep.ptr<i32>, %tokens_in: !ep.ptr<i32>, %weights_in: !ep.ptr<f32>,
                               %scales_in: !ep.ptr<i8>, %indices_in: !ep.ptr<i32>, %origins_in: !ep.ptr<i32>,
                               %route: !ep.ptr<i32>, %replay: index, %per_source: index, %rank: index,
                               %w: !ep.window) warps_per_block(4)
    when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %token_words = ep.param_value @token_words : index
    %scale_bytes = ep.param_value @scale_bytes : index
    %topk = ep.param_value @topk : index
    %world = ep.param_value @world : index
    %capacity = ep.param_value @capacity : index
    %capacity_i32 = arith.index_cast %capacity : index to i32
    %error_word = ep.constant_value @state_error : index
    %total_word = ep.constant_value @state_total_recv : index
    %over_capacity = ep.constant_value @error_capacity_exceeded : i32
    %bad_count = ep.constant_value @error_internode_count : i32
    %node_word = ep.constant_value @state_node_recv : index
    %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
    // The node's rows: counted by this call's dispatch; a replay's route
    // records the whole total (as MORI's handle does), so the node's part is
    // what the off-node sources did not send.
    %total_at = ep.buffer_offset @route_received : index
    // Each word is read only in the mode that does not rewrite it below: a
    // replay rewrites state_node_recv, a counting call the route's total.
    %replaying = arith.cmpi ne, %replay, %c0 : index
    %counted, %recorded = scf.if %replaying -> (index, index) {
      %recorded_i32 = ep.load %route[%total_at] : !ep.ptr<i32>
      %recorded_rows = arith.index_cast %recorded_i32 : i32 to index
      scf.yield %c0, %recorded_rows : index, index
    } else {
      %counted_i32 = ep.load %state[%node_word] : !ep.ptr<i32>
      %counted_rows = arith.index_cast %counted_i32 : i32 to index
      scf.yield %counted_rows, %c0 : index, index
    }
    %off_rows = func.call @inbox_base(%counts, %world, %c0, %per_source, %rank, %w)
        : (!ep.ptr<i32>, index, index, index, index, !ep.window) -> index
    %below = arith.cmpi ult, %recorded, %off_rows : index
    %short = arith.andi %replaying, %below : i1
    scf.if %short {
      ep.atomic_store %bad_count, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
    }
    %recorded_node = arith.subi %recorded, %off_rows : index
    %kept_node = arith.select %short, %c0, %recorded_node : index
    %node_rows = arith.select %replaying, %kept_node, %counted : index
    scf.for %source = %c0 to %world step %c1 {
      %off = func.call @off_node(%rank, %source) : (index, index) -> i1
      scf.if %off {
        %count = func.call @inbox_count(%counts, %source, %per_source, %rank, %w)
            : (!ep.ptr<i32>, index, index, index, !ep.window) -> index
        %base = func.call @source_rows_at(%counts, %source, %node_rows, %per_source, %rank, %w, %route)
            : (!ep.ptr<i32>, index, index, index, index, !ep.window, !ep.ptr<i32>) -> index
        %box_base = arith.muli %source, %per_source : index
        scf.for %i = %first to %count step %stride {
          %slot = arith.addi %base, %i : index
          %box = arith.addi %box_base, %i : index
          %fits = arith.cmpi ult, %slot, %capacity : index
          scf.if %fits {
            %from_words = arith.muli %box, %token_words : index
            %to_words = arith.muli %slot, %token_words : index
            %to_tokens = ep.peer_ptr %w[%rank] @recv_tokens[%to_words] : !ep.ptr<i32>
            ep.warp.copy_row %tokens_in[%from_words], %to_tokens[%c0], %token_words : !ep.ptr<i32> -> !ep.ptr<i32>
            %from_row = arith.muli %box, %topk : index
            %to_row = arith.muli %slot, %topk : index
            %to_weights = ep.peer_ptr %w[%rank] @recv_weights[%to_row] : !ep.ptr<f32>
            ep.warp.copy_row %weights_in[%from_row], %to_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
            %to_indices = ep.peer_ptr %w[%rank] @recv_indices[%to_row] : !ep.ptr<i32>
            ep.warp.copy_row %indices_in[%from_row], %to_indices[%c0], %topk : !ep.ptr<i32> -> !ep.ptr<i32>
            %from_scales = arith.muli %box, %scale_bytes : index
            %to_scales_at = arith.muli %slot, %scale_bytes : index
            %to_scales = ep.peer_ptr %w[%rank] @recv_scales[%to_scales_at] : !ep.ptr<i8>
            ep.warp.copy_row %scales_in[%from_scales], %to_scales[%c0], %scale_bytes : !ep.ptr<i8> -> !ep.ptr<i8>
            %from_origin = arith.muli %box, %c2 : index
            %to_origin_at = arith.muli %slot, %c2 : index
            %to_origin = ep.peer_ptr %w[%rank] @recv_origin[%to_origin_at] : !ep.ptr<i32>
            ep.warp.copy_row %origins_in[%from_origin], %to_origin[%c0], %c2 : !ep.ptr<i32> -> !ep.ptr<i32>
          } else {
            ep.atomic_store %over_capacity, %state[%error_word] scope(system) order(relaxed) : !ep.ptr<i32>
          }
        }
      }
    }
    // Every warp knows the total; the first publishes it, with the node's
    // part (the return leg's base), and records it in the route (later
    // kernels of this rank are ordered after this one by the stream).
    %leads = arith.cmpi eq, %first, %c0 : index
    scf.if %leads {
      %end = arith.addi %node_rows, %off_rows : index
      %end_i32 = arith.index_cast %end : index to i32
      %overflow = arith.cmpi sgt, %end_i32, %capacity_i32 : i32
      %kept = arith.select %overflow, %capacity_i32, %end_i32 : i32
      ep.store %kept, %state[%total_word] : !ep.ptr<i32>
      scf.if %replaying {
        %node_rows_i32 = arith.index_cast %node_rows : index to i32
        ep.store %node_rows_i32, %state[%node_word] : !ep.ptr<i32>
      } else {
        ep.store %end_i32, %route[%total_at] : !ep.ptr<i32>
      }
    }
  }
}

// Before combine's transfer: for each off-node source, the expert outputs
// (and weights) of the rows it sent, in the order it sent them, into
// `rows_out` / `weights_out` at [source * per_source + i]. It reads `input`
// below the received count only (the caller's rows may be just that many;
// a count from the network never reads past them).
ep.kernel @ep_internode_return_pack(%input: !ep.ptr<!ep.row_elem<"combine_elem">>, %in_weights: !ep.ptr<f32>,
                                    %has_weights: index, %counts: !ep.ptr<i32>,
                                    %rows_out: !ep.ptr<!ep.row_elem<"combine_elem">>, %weights_out: !ep.ptr<f32>,
                                    %route: !ep.ptr<i32>, %per_source: index, %rank: index, %w: !ep.window)
    warps_per_block(4) when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %hidden = ep.param_value @hidden : index
    %topk = ep.param_value @topk : index
    %world = ep.param_value @world : index
    %capacity = ep.param_value @capacity : index
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
    %node_word = ep.constant_value @state_node_recv : index
    %total_word = ep.constant_value @state_total_recv : index
    %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
    %node_rows_i32 = ep.load %state[%node_word] : !ep.ptr<i32>
    %node_rows = arith.index_cast %node_rows_i32 : i32 to index
    %received_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
    %received = arith.index_cast %received_i32 : i32 to index
    %past_capacity = arith.cmpi ugt, %received, %capacity : index
    %readable = arith.select %past_capacity, %capacity, %received : index
    scf.for %source = %c0 to %world step %c1 {
      %off = func.call @off_node(%rank, %source) : (index, index) -> i1
      scf.if %off {
        %count = func.call @inbox_count(%counts, %source, %per_source, %rank, %w)
            : (!ep.ptr<i32>, index, index, index, !ep.window) -> index
        %base = func.call @source_rows_at(%counts, %source, %node_rows, %per_source, %rank, %w, %route)
            : (!ep.ptr<i32>, index, index, index, index, !ep.window, !ep.ptr<i32>) -> index
        %box_base = arith.muli %source, %per_source : index
        scf.for %i = %first to %count step %stride {
          %slot = arith.addi %base, %i : index
          %box = arith.addi %box_base, %i : index
          %fits = arith.cmpi ult, %slot, %readable : index
          scf.if %fits {
            %from = arith.muli %slot, %hidden : index
            %to = arith.muli %box, %hidden : index
            ep.warp.copy_row %input[%from], %rows_out[%to], %hidden
                : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
            scf.if %weighted {
              %from_weights = arith.muli %slot, %topk : index
              %to_weights = arith.muli %box, %topk : index
              ep.warp.copy_row %in_weights[%from_weights], %weights_out[%to_weights], %topk
                  : !ep.ptr<f32> -> !ep.ptr<f32>
            }
          }
        }
      }
    }
  }
}

// Scatter, after combine's transfer: the rows each off-node destination sent
// back (in the order this rank sent it the tokens, which its outbox's origin
// words record) go into this rank's inbox boxes, token * topk + ordinal, where
// the sum reads every contribution.
ep.kernel @ep_internode_return_unpack(%rows_in: !ep.ptr<!ep.row_elem<"combine_elem">>, %weights_in: !ep.ptr<f32>,
                                      %has_weights: index, %route: !ep.ptr<i32>, %per_source: index,
                                      %rank: index, %w: !ep.window) warps_per_block(4)
    when(@gpu_per_node lt @world) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %answered = func.call @peers_answered(%w, %rank) : (!ep.window, index) -> i1
  scf.if %answered {
    %hidden = ep.param_value @hidden : index
    %topk = ep.param_value @topk : index
    %world = ep.param_value @world : index
    %max_tokens = ep.param_value @max_tokens : index
    %weighted = arith.cmpi ne, %has_weights, %c0 : index
    %first = func.call @block_major_warp_index() : () -> index
    %stride = ep.global_warp_count : index
    scf.for %dest = %c0 to %world step %c1 {
      %off = func.call @off_node(%rank, %dest) : (index, index) -> i1
      scf.if %off {
        %sent_at = func.call @route_sent_word(%dest) : (index) -> index
        %sent_i32 = ep.load %route[%sent_at] : !ep.ptr<i32>
        %sent = arith.index_cast %sent_i32 : i32 to index
        %origins = ep.peer_ptr %w[%dest] @recv_origin[%c0] : !ep.ptr<i32>
        %box_base = arith.muli %dest, %per_source : index
        scf.for %i = %first to %sent step %stride {
          %origin_at = arith.muli %i, %c2 : index
          %ordinal_at = arith.addi %origin_at, %c1 : index
          %origin_i32 = ep.load %origins[%origin_at] : !ep.ptr<i32>
          %ordinal_i32 = ep.load %origins[%ordinal_at] : !ep.ptr<i32>
          %origin = arith.index_cast %origin_i32 : i32 to index
          %ordinal = arith.index_cast %ordinal_i32 : i32 to index
          %token = arith.remui %origin, %max_tokens : index
          %token_row = arith.muli %token, %topk : index
          %inbox_box = arith.addi %token_row, %ordinal : index
          %returned = arith.addi %box_base, %i : index
          %from = arith.muli %returned, %hidden : index
          %to = arith.muli %inbox_box, %hidden : index
          %rows = ep.peer_ptr %w[%rank] @scatter_rows[%to] : !ep.ptr<!ep.row_elem<"combine_elem">>
          ep.warp.copy_row %rows_in[%from], %rows[%c0], %hidden
              : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<!ep.row_elem<"combine_elem">>
          scf.if %weighted {
            %from_weights = arith.muli %returned, %topk : index
            %to_weights = arith.muli %inbox_box, %topk : index
            %box_weights = ep.peer_ptr %w[%rank] @scatter_weights[%to_weights] : !ep.ptr<f32>
            ep.warp.copy_row %weights_in[%from_weights], %box_weights[%c0], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          }
        }
      }
    }
  }
}
