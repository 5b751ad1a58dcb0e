// ep.warp.quantize with DeepEP's per-128 cast (#ep.scale<deepep>, deepep_pow2,
// deepep_ue8m0): a warp per token of `input` ([tokens, hidden] bf16, hidden a multiple of 128; of 512 for ue8m0) into
// OCP E4M3 codes ([tokens, hidden] bytes) and the scales in DeepEP's
// low-latency layouts: f32 column-major ([blocks, tokens], a stride of
// `tokens` between blocks), or UE8M0 bytes packed four blocks to a word
// ([blocks / 4, tokens] words: groups of 4 bytes, 4 * tokens bytes apart).
ep.kernel @deepep_cast(%input: !ep.ptr<bf16>, %codes: !ep.ptr<i8>, %scales: !ep.ptr<f32>, %tokens: index,
                  %hidden: index) warps_per_block(4) {
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    ep.warp.quantize %input[%row], %codes[%row], %hidden scales %scales[%token] scales_stride %tokens
        {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep>, scales_group = 1, software_fallback}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  }
}

ep.kernel @deepep_cast_pow2(%input: !ep.ptr<bf16>, %codes: !ep.ptr<i8>, %scales: !ep.ptr<f32>, %tokens: index,
                  %hidden: index) warps_per_block(4) {
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    ep.warp.quantize %input[%row], %codes[%row], %hidden scales %scales[%token] scales_stride %tokens
        {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_pow2>, software_fallback}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<f32>
  }
}

ep.kernel @deepep_cast_ue8m0(%input: !ep.ptr<bf16>, %codes: !ep.ptr<i8>, %scales: !ep.ptr<i8>, %tokens: index,
                  %hidden: index) warps_per_block(4) {
  %c4 = arith.constant 4 : index
  %first = ep.global_warp_index : index
  %stride = ep.global_warp_count : index
  %word_stride = arith.muli %tokens, %c4 : index
  scf.for %token = %first to %tokens step %stride {
    %row = arith.muli %token, %hidden : index
    %word = arith.muli %token, %c4 : index
    ep.warp.quantize %input[%row], %codes[%row], %hidden scales %scales[%word] scales_stride %word_stride
        {format = #ep.fp8<e4m3fn>, block = 128, scale = #ep.scale<deepep_ue8m0>, scales_group = 4,
         software_fallback}
        : !ep.ptr<bf16> -> !ep.ptr<i8>, !ep.ptr<i8>
  }
}
