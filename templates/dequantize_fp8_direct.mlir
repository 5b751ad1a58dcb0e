// dequantize_fp8_direct: the inverse of quantize_fp8_direct, fp8 codes to bf16.
//   args: input [tokens, hidden] fp8 bytes, output [tokens, hidden] bf16, tokens
ep.param @hidden : index {min = 1 : i64}

ep.kernel @dequantize_fp8_direct(%input: !ep.ptr<i8>, %output: !ep.ptr<bf16>, %tokens: index) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    ep.warp.dequantize %input[%row], %output[%row], %hidden {format = #ep.fp8<target>}
        : !ep.ptr<i8> -> !ep.ptr<bf16>
  }
}
