// dequantize_mxfp4: the inverse of quantize_mxfp4.
//   args: input [tokens, hidden / 2] bytes, scales [tokens, ceil(hidden / 32)] e8m0 bytes,
//         output [tokens, hidden] bf16, tokens
ep.param @hidden : index {min = 2 : i64, multiple_of = 2 : i64}

ep.kernel @dequantize_mxfp4(%input: !ep.ptr<i8>, %scales: !ep.ptr<i8>, %output: !ep.ptr<bf16>, %tokens: index) warps_per_block(4) {
  %hidden = ep.param_value @hidden : index
  %c2 = arith.constant 2 : index
  %c31 = arith.constant 31 : index
  %c32 = arith.constant 32 : index
  %row_bytes = arith.divui %hidden, %c2 : index
  %padded = arith.addi %hidden, %c31 : index
  %blocks = arith.divui %padded, %c32 : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    %packed_row = arith.muli %token, %row_bytes : index
    %scale_row = arith.muli %token, %blocks : index
    ep.warp.dequantize %input[%packed_row], %output[%row], %hidden scales %scales[%scale_row]
        {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>}
        : !ep.ptr<i8> -> !ep.ptr<bf16>, !ep.ptr<i8>
  }
}
