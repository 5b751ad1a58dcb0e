// ep/std_moe_quantize: the standard-MoE packed rows in OCP E4M3 with DeepEP's
// per-128 scales (std_moe_quant; DeepEP's low-latency fp8 dispatch), in its
// layouts: codes [experts_per_rank, world * max_tokens, hidden], scales
// column-major per expert: f32 [experts_per_rank, hidden / 128, rows], or
// UE8M0 bytes four blocks to an int32 word, [experts_per_rank, hidden / 512,
// rows] words. DeepEP quantizes before sending and every byte of a row is
// its own (amax over its 128 elements), so quantizing the packed rows gives
// the same codes and scales.
ep.include "ep/common"
ep.include "ep/std_moe"

// Items (entry, piece of 512 elements: four scale blocks, one UE8M0 word) on
// warps counted block by block; an entry that packed no row (another rank's
// expert, a repeat, -1) has nothing to quantize.
ep.kernel @ep_std_moe_quantize(%packed: !ep.ptr<bf16>, %codes: !ep.ptr<i8>, %scale_words: !ep.ptr<f32>,
                               %scale_bytes: !ep.ptr<i8>, %rank: index, %w: !ep.window) warps_per_block(4)
    when(@std_moe and @std_moe_quant ne "none") {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %c512 = arith.constant 512 : index
  %quant = ep.param_value @std_moe_quant : index
  %pow2 = arith.cmpi eq, %quant, %c2 : index
  %ue8m0 = arith.cmpi eq, %quant, %c3 : index
  %hidden = ep.param_value @hidden : index
  %topk = ep.param_value @topk : index
  %epr = ep.param_value @experts_per_rank : index
  %world = ep.param_value @world : index
  %max_tokens = ep.param_value @max_tokens : index
  %rows_per_expert = arith.muli %world, %max_tokens : index
  %blocks = arith.divui %hidden, %c128 : index
  %word_groups = arith.divui %blocks, %c4 : index
  %byte_stride = arith.muli %rows_per_expert, %c4 : index
  %total_word = ep.constant_value @state_total_recv : index
  %state = ep.peer_ptr %w[%rank] @state[%c0] : !ep.ptr<i32>
  %total_i32 = ep.load %state[%total_word] : !ep.ptr<i32>
  %total = arith.index_cast %total_i32 : i32 to index
  %indices = ep.peer_ptr %w[%rank] @recv_indices[%c0] : !ep.ptr<i32>
  %slots = ep.peer_ptr %w[%rank] @moe_slots[%c0] : !ep.ptr<i32>
  %pieces = func.call @ceil_div(%hidden, %c512) : (index, index) -> index
  %entries = arith.muli %total, %topk : index
  %items = arith.muli %entries, %pieces : index
  %first = func.call @block_major_warp_index() : () -> index
  %stride = ep.global_warp_count : index
  scf.for %item = %first to %items step %stride {
    %entry = arith.divui %item, %pieces : index
    %piece = arith.remui %item, %pieces : index
    %i = arith.divui %entry, %topk : index
    %j = arith.remui %entry, %topk : index
    %row = arith.muli %i, %topk : index
    %expert_i32 = ep.load %indices[%entry] : !ep.ptr<i32>
    %expert = arith.index_cast %expert_i32 : i32 to index
    %valid = func.call @entry_packed_here(%indices, %row, %j, %expert, %rank)
        : (!ep.ptr<i32>, index, index, index, index) -> i1
    scf.if %valid {
      %position_i32 = ep.load %slots[%entry] : !ep.ptr<i32>
      %position = arith.index_cast %position_i32 : i32 to index
      %packed_row = func.call @expert_row(%expert, %position) : (index, index) -> index
      %local = arith.remui %expert, %epr : index
      %c = arith.muli %piece, %c512 : index
      %left = arith.subi %hidden, %c : index
      %short = arith.cmpi ult, %left, %c512 : index
      %n = arith.select %short, %left, %c512 : index
      %row_at = arith.muli %packed_row, %hidden : index
      %at = arith.addi %row_at, %c : index
      scf.if %ue8m0 {
        // Word (local, piece, position) of [experts, hidden / 512, rows]; block b's byte is b % 4 of word b / 4.
        %expert_words = arith.muli %local, %word_groups : index
        %group_row = arith.addi %expert_words, %piece : index
        %group_at = arith.muli %group_row, %rows_per_expert : index
        %word = arith.addi %group_at, %position : index
        %byte = arith.muli %word, %c4 : index
        ep.warp.quantize %packed[%at], %codes[%at], %n scales %scale_bytes[%byte] scales_stride %byte_stride
            {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_ue8m0>, scales_group = 4,
             software_fallback}
            : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
      } else {
        // Scale (local, block, position) of [experts, hidden / 128, rows].
        %first_block = arith.muli %piece, %c4 : index
        %expert_blocks = arith.muli %local, %blocks : index
        %block_row = arith.addi %expert_blocks, %first_block : index
        %block_at = arith.muli %block_row, %rows_per_expert : index
        %scale_at = arith.addi %block_at, %position : index
        scf.if %pow2 {
          ep.warp.quantize %packed[%at], %codes[%at], %n scales %scale_words[%scale_at]
              scales_stride %rows_per_expert
              {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_pow2>, software_fallback}
              : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
        } else {
          ep.warp.quantize %packed[%at], %codes[%at], %n scales %scale_words[%scale_at]
              scales_stride %rows_per_expert
              {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep>, software_fallback}
              : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
        }
      }
    }
  }
}
