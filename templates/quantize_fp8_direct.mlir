// quantize_fp8_direct: a [tokens, hidden] bf16 tensor to the target's fp8,
// saturating, no scale. One warp per token, grid-stride over tokens.
//   args: input [tokens, hidden] bf16, output [tokens, hidden] fp8 bytes, tokens
ep.param @hidden : index {min = 1 : i64}

ep.kernel @quantize_fp8_direct(%input: !ep.ptr<bf16>, %output: !ep.ptr<i8>, %tokens: index) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    ep.warp.quantize %input[%row], %output[%row], %hidden {format = #ep.fp8<target>}
        : !ep.ptr<bf16> -> !ep.ptr<i8>
  }
}
