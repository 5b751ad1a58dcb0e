// ep.warp.sum_rows with weighted sources (DeepEP's low-latency combine sum):
// out[0, count) = +0.0 plus fma(row_j, weight_j, acc) over the three rows of
// `rows` ([3, count] bf16) in order, row j counting where valid[j] != 0,
// rounded once to bf16. One warp sums; the others have nothing to do.
ep.kernel @weighted_sum(%rows: !ep.ptr<bf16>, %weights: !ep.ptr<f32>, %valid: !ep.ptr<i32>, %out: !ep.ptr<bf16>,
                        %count: index) warps_per_block(4) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0 : i32
  %warp = ep.global_warp_index : index
  %first = arith.cmpi eq, %warp, %c0 : index
  scf.if %first {
    ep.warp.sum_rows %out[%c0], %count, sources(%c3) : !ep.ptr<bf16> {
    ^bb0(%j: index):
      %flag = ep.load %valid[%j] : !ep.ptr<i32>
      %live = arith.cmpi ne, %flag, %zero : i32
      %weight = ep.load %weights[%j] : !ep.ptr<f32>
      %at = arith.muli %j, %count : index
      %row = ep.ptr_add %rows, %at : !ep.ptr<bf16>
      ep.source %live, %row weight %weight : !ep.ptr<bf16>
    }
  }
}
