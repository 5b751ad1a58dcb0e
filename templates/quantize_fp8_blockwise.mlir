// quantize_fp8_blockwise: a [tokens, hidden] bf16 tensor to the target's fp8
// with one f32 scale per 128 elements (scale = amax / fp8_max when amax
// exceeds it, else 1). The last block of a row may be partial.
//   args: input [tokens, hidden] bf16, output [tokens, hidden] fp8 bytes,
//         scales [tokens, ceil(hidden / 128)] f32, tokens
ep.param @hidden : index {min = 1 : i64}

ep.kernel @quantize_fp8_blockwise(%input: !ep.ptr<bf16>, %output: !ep.ptr<i8>, %scales: !ep.ptr<f32>,
                                  %tokens: index) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
  %c127 = arith.constant 127 : index
  %c128 = arith.constant 128 : index
  %padded = arith.addi %hidden, %c127 : index
  %blocks = arith.divui %padded, %c128 : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    %scale_row = arith.muli %token, %blocks : index
    ep.warp.quantize %input[%row], %output[%row], %hidden scales %scales[%scale_row]
        {format = #ep.fp8<target>, block = 128, scale = #ep.scale<f32>}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  }
}
