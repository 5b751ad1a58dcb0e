// quantize_mxfp4: a [tokens, hidden] bf16 tensor to MX FP4: E2M1 codes packed
// two per byte (element 2i in the low nibble of byte i) and one E8M0 scale
// per 32 elements. hidden must be even; the last block may be partial.
//   args: input [tokens, hidden] bf16, output [tokens, hidden / 2] bytes,
//         scales [tokens, ceil(hidden / 32)] e8m0 bytes, tokens
ep.param @hidden : index {min = 2 : i64, multiple_of = 2 : i64}

ep.kernel @quantize_mxfp4(%input: !ep.ptr<bf16>, %output: !ep.ptr<i8>, %scales: !ep.ptr<i8>, %tokens: index) warps_per_block(4) {
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
    ep.warp.quantize %input[%row], %output[%packed_row], %hidden scales %scales[%scale_row]
        {format = #ep.fp4<e2m1>, block = 32, scale = #ep.scale<e8m0>}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  }
}
