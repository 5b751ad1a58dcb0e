// ep/combine: what gather and scatter combine share once every rank has
// staged its contributions: each of this rank's tokens is summed from them in
// f32, in destination order (the first contribution converted, the others
// accumulated), and rounded once. Gather reads the contributions from the
// destinations' windows; scatter from this rank's inbox (dequantizing fp8
// codes under quant). The mode is a parameter, so each specialization keeps
// one of the two addressings.
ep.include "ep/common"
ep.include "ep/sync"

// Adds contribution j of a token (route entry `entry`, inbox row `box`) for
// the chunk of n elements at element c into acc; the first is converted into
// acc, the others accumulated. `scratch` holds a dequantized contribution.
func.func private @add_contribution(%w: !ep.window, %rank: index, %entry: i32, %box: index, %c: index, %n: index,
                                    %first: i1, %acc: !ep.ptr<f32>, %scratch: !ep.ptr<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %true = arith.constant true
  %c127 = arith.constant 127 : index
  %c128 = arith.constant 128 : index
  %mode = ep.param_value @combine_mode : index
  %quant = ep.param_value @quant : index
  %hidden = ep.param_value @hidden : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %gather = arith.cmpi eq, %mode, %c0 : index
  %direct = arith.cmpi eq, %quant, %c1 : index
  scf.if %gather {
    // The destination's staged expert output.
    %dest_i32 = arith.divsi %entry, %capacity_i32 : i32
    %slot_i32 = arith.remsi %entry, %capacity_i32 : i32
    %dest = arith.index_cast %dest_i32 : i32 to index
    %slot = arith.index_cast %slot_i32 : i32 to index
    %src_row = arith.muli %slot, %hidden : index
    %src_at = arith.addi %src_row, %c : index
    %src = ep.peer_ptr %w[%dest] @combine_rows[%src_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
    scf.if %first {
      ep.warp.copy_row %src[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
    } else {
      ep.warp.accumulate %src[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
    }
  } else {
    // This rank's inbox row for the contribution: fp8 codes under quant
    // (the first decoded into acc, the others into scratch and added), else rows.
    %box_row = arith.muli %box, %hidden : index
    %box_at = arith.addi %box_row, %c : index
    %quantized = arith.cmpi ne, %quant, %c0 : index
    scf.if %quantized {
      %into = arith.select %first, %acc, %scratch : !ep.ptr<f32>
      %codes = ep.peer_ptr %w[%rank] @scatter_codes[%box_at] : !ep.ptr<i8>
      scf.if %direct {
        ep.warp.dequantize %codes[%c0], %into[%c0], %n {format = #ep.fp8<target>} : !ep.ptr<i8> -> !ep.ptr<f32>
      } else {
        %padded = arith.addi %hidden, %c127 : index
        %blocks = arith.divui %padded, %c128 : index
        %first_block = arith.divui %c, %c128 : index
        %scales_row = arith.muli %box, %blocks : index
        %scales_at = arith.addi %scales_row, %first_block : index
        %scales = ep.peer_ptr %w[%rank] @scatter_scales[%scales_at] : !ep.ptr<f32>
        ep.warp.dequantize %codes[%c0], %into[%c0], %n scales %scales[%c0]
            {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
            : !ep.ptr<i8> -> !ep.ptr<f32>, !ep.ptr<f32>
      }
      %later = arith.xori %first, %true : i1
      scf.if %later {
        ep.warp.accumulate %scratch[%c0], %acc[%c0], %n : !ep.ptr<f32> -> !ep.ptr<f32>
      }
    } else {
      %rows = ep.peer_ptr %w[%rank] @scatter_rows[%box_at] : !ep.ptr<!ep.row_elem<"combine_elem">>
      scf.if %first {
        ep.warp.copy_row %rows[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
      } else {
        ep.warp.accumulate %rows[%c0], %acc[%c0], %n : !ep.ptr<!ep.row_elem<"combine_elem">> -> !ep.ptr<f32>
      }
    }
  }
  return
}

// Sums each of this rank's `tokens` tokens from its contributions into
// `output` and, when weighted, their weights into `out_weights`. Work items
// are (token, chunk) pairs, so a few tokens still spread over many warps;
// each warp sums a chunk in its own f32 scratch.
func.func private @sum_contributions(%w: !ep.window, %rank: index, %route: !ep.ptr<i32>, %tokens: index,
                                     %output: !ep.ptr<!ep.row_elem<"combine_elem">>, %out_weights: !ep.ptr<f32>,
                                     %weighted: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c0_i32 = arith.constant 0 : i32
  %chunk = ep.param_value @chunk : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %mode = ep.param_value @combine_mode : index
  %capacity = ep.param_value @capacity : index
  %capacity_i32 = arith.index_cast %capacity : index to i32
  %gather = arith.cmpi eq, %mode, %c0 : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  %scratch_at = arith.muli %first, %chunk : index
  %acc = ep.peer_ptr %w[%rank] @accumulator[%scratch_at] : !ep.ptr<f32>
  %scratch = ep.peer_ptr %w[%rank] @dequantized[%scratch_at] : !ep.ptr<f32>
  %chunk_span = arith.addi %hidden, %chunk : index
  %chunk_span_1 = arith.subi %chunk_span, %c1 : index
  %chunks = arith.divui %chunk_span_1, %chunk : index
  %items = arith.muli %tokens, %chunks : index
  scf.for %item = %first to %items step %stride {
    %token = arith.divui %item, %chunks : index
    %chunk_index = arith.remui %item, %chunks : index
    %c = arith.muli %chunk_index, %chunk : index
    %row = arith.muli %token, %topk : index
    %out_at = arith.muli %token, %hidden : index
    %left = arith.subi %hidden, %c : index
    %short = arith.cmpi ult, %left, %chunk : index
    %n = arith.select %short, %left, %chunk : index
    scf.for %j = %c0 to %topk step %c1 {
      %box = arith.addi %row, %j : index
      %entry = ep.load %route[%box] : !ep.ptr<i32>
      %valid = arith.cmpi sge, %entry, %c0_i32 : i32
      scf.if %valid {
        %is_first = arith.cmpi eq, %j, %c0 : index
        func.call @add_contribution(%w, %rank, %entry, %box, %c, %n, %is_first, %acc, %scratch)
            : (!ep.window, index, i32, index, index, index, i1, !ep.ptr<f32>, !ep.ptr<f32>) -> ()
      }
    }
    %out_chunk = arith.addi %out_at, %c : index
    ep.warp.copy_row %acc[%c0], %output[%out_chunk], %n : !ep.ptr<f32> -> !ep.ptr<!ep.row_elem<"combine_elem">>
    %first_chunk = arith.cmpi eq, %chunk_index, %c0 : index
    %weights_here = arith.andi %weighted, %first_chunk : i1
    scf.if %weights_here {
      scf.for %j = %c0 to %topk step %c1 {
        %box = arith.addi %row, %j : index
        %entry = ep.load %route[%box] : !ep.ptr<i32>
        %valid = arith.cmpi sge, %entry, %c0_i32 : i32
        scf.if %valid {
          // Gather: the destination's staged weights; scatter: this rank's inbox.
          %dest_i32 = arith.divsi %entry, %capacity_i32 : i32
          %slot_i32 = arith.remsi %entry, %capacity_i32 : i32
          %dest = arith.index_cast %dest_i32 : i32 to index
          %slot = arith.index_cast %slot_i32 : i32 to index
          %staged_at = arith.muli %slot, %topk : index
          %staged = ep.peer_ptr %w[%dest] @combine_weights[%staged_at] : !ep.ptr<f32>
          %box_at = arith.muli %box, %topk : index
          %inbox = ep.peer_ptr %w[%rank] @scatter_weights[%box_at] : !ep.ptr<f32>
          %src = arith.select %gather, %staged, %inbox : !ep.ptr<f32>
          %is_first = arith.cmpi eq, %j, %c0 : index
          scf.if %is_first {
            ep.warp.copy_row %src[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          } else {
            ep.warp.accumulate %src[%c0], %out_weights[%row], %topk : !ep.ptr<f32> -> !ep.ptr<f32>
          }
        }
      }
    }
  }
  return
}
