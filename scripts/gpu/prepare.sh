#!/usr/bin/env bash
# The GPU check's one preparation, for either vendor: makes .gpu/, what
# travels to a GPU machine (which has no LLVM/MLIR): the stripped GPU tests
# and tools, a bundle of the kernels they use for the targets GPU_TARGETS
# names, warmed here (NVRTC and clang need no GPU), the compiler provider,
# and the named checks. The same .gpu runs on an NVIDIA host (CUDA) and an
# AMD one (ROCm): ./run finds the GPUs and their target.
#   GPU_TARGETS=sm90 (default) | sm90,sm100 | gfx942 | gfx942,gfx950 | ...
# On the GPU machine:
#   cd .gpu && ./run --help          the checks, one line each
#   cd .gpu && ./run CHECK OUTDIR    one check, its logs under OUTDIR
#   scripts/gpu/prepare.sh [BUILD_DIR]   (default build; BEFORE=<an older .gpu>
#   adds its bundle and tools for the ab checks, BEFORE_TREE=<commit> its
#   sources for py-ab; DEEPEP_SOURCE=<deepep_source.sh's archive> DeepEP for the peers check)
# With BEFORE= (two bundles) .gpu and the tree pass the device tool's 64 MiB
# carry; .gpu.tgz (about a third of the size) travels instead:
#   carry [".gpu.tgz"]: rm -rf .gpu && tar xzf .gpu.tgz && cd .gpu && ./run CHECK OUTDIR
set -euo pipefail
build=${1:-build}
out=${GPU_OUT:-.gpu}  # another name keeps an existing .gpu (a second vendor's, or the before side)
# The benchmark's shape: DeepSeek-V3 (256 experts) on WORLD GPUs (EP2, or EP1
# where one GPU is lent), the token sweep of issue 6.
bench_shape() {
  local world=$1
  echo --world "$world" --hidden 7168 --topk 8 --experts-per-rank $((256 / world)) \
    --tokens 1,8,32,128,512,1024,2048,4096,8192
}
IFS=, read -ra targets <<< "${GPU_TARGETS:-sm90}"
# The device each target's tools run on, and the test kernels' binary suffix.
device_of() { case $1 in sm*) echo cuda ;; gfx*) echo hip ;; *) echo "GPU_TARGETS: '$1' is not a GPU target" >&2; exit 2 ;; esac; }
binary_of() { case $1 in sm*) echo cubin ;; *) echo co ;; esac; }
# Targets with FP4 conversions (hardware or sm90's codec): gfx942 and gfx1200 have none.
has_fp4() { [[ $1 != gfx942 && $1 != gfx1200 ]]; }
for target in "${targets[@]}"; do device_of "$target" > /dev/null; done
rm -rf "$out" && mkdir -p "$out"
printf '%s\n' "${targets[@]}" > "$out/targets.txt"
# The templates' kernels (gpu_templates_test); MX FP4 where the target has FP4.
manifest() {
  local fp4=$1 list
  list=$(printf '"%s", ' "${@:2}")
  echo "{\"targets\": [${list%, }],"
  echo ' "kernels": ['
  echo '  {"template": "quantize_fp8_direct", "params": {"hidden": 7168}},'
  echo '  {"template": "quantize_fp8_direct", "params": {"hidden": 37}},'
  echo '  {"template": "quantize_fp8_blockwise", "params": {"hidden": 7168}},'
  echo '  {"template": "quantize_fp8_blockwise", "params": {"hidden": 333}},'
  echo '  {"template": "dequantize_fp8_direct", "params": {"hidden": 7168}},'
  echo '  {"template": "dequantize_fp8_direct", "params": {"hidden": 37}},'
  echo '  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 7168}},'
  if [[ $fp4 == fp4 ]]; then
    echo '  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 333}},'
    echo '  {"template": "quantize_mxfp4", "params": {"hidden": 7168}},'
    echo '  {"template": "quantize_mxfp4", "params": {"hidden": 86}},'
    echo '  {"template": "dequantize_mxfp4", "params": {"hidden": 7168}},'
    echo '  {"template": "dequantize_mxfp4", "params": {"hidden": 86}}]}'
  else
    echo '  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 333}}]}'
  fi
}
fp4_targets=() plain_targets=()
for target in "${targets[@]}"; do
  if has_fp4 "$target"; then fp4_targets+=("$target"); else plain_targets+=("$target"); fi
done
(( ${#fp4_targets[@]} )) && manifest fp4 "${fp4_targets[@]}" > "$out/manifest-fp4.json"
(( ${#plain_targets[@]} )) && manifest plain "${plain_targets[@]}" > "$out/manifest-plain.json"
for manifest_file in "$out"/manifest-*.json; do
  "$build/bin/epjit-warm" "$manifest_file" --cache-dir "$out/warm" --json
done
# The EP op's kernels: every configuration the GPU tests and the benchmark use.
EPJIT_GPU_WARM_ONLY="$PWD/$out/warm" EPJIT_GPU_WARM_TARGETS="${GPU_TARGETS:-sm90}" "$build/bin/gpu_ep_test" \
  --gtest_filter='GpuEpWarm.*' > "$out/warm-tests.log"
for target in "${targets[@]}"; do
  on=(--target "$target" --device "$(device_of "$target")")
  for world in 1 2 4; do
    for dtype in bf16 fp8; do
      "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes $(bench_shape $world) \
        --dtype "$dtype" --cache-dir "$out/warm"
    done
  done
  # EP1 on one GPU (the ep1-matrix check): the combines whose work is local
  # (std-MoE pack and unpack, gather's and scatter's, scatter's sum) measured where no second GPU is lent.
  for flags in "--std-moe" "--std-moe --combine-mode scatter" "--combine-mode scatter" \
    "--combine-mode scatter --quant fp8_direct_cast" "--std-moe --combine-mode scatter --quant fp8_direct_cast" \
    "--std-moe --combine-mode scatter --quant fp8_blockwise" "--receive-order source"; do
    "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes $(bench_shape 1) \
      --dtype bf16 $flags --cache-dir "$out/warm"
  done
  # The combine protocols at small calls (the protocol check): the
  # low-latency combine and the staged one, gather and scatter, EP1 and EP2.
  for world in 1 2; do
    for protocol in on off; do
      for mode in gather scatter; do
        "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes --world $world \
          --hidden 7168 --topk 8 --experts-per-rank $((256 / world)) --tokens 1,8,32,128 --dtype bf16 \
          --combine-mode $mode --low-latency-combine $protocol --cache-dir "$out/warm"
      done
    done
  done
  # EP4 (issue 17) also times scatter combine.
  "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes $(bench_shape 4) \
    --dtype bf16 --combine-mode scatter --cache-dir "$out/warm"
  # Internode (issue 16): two nodes of one GPU (EP2) and of two (EP4); v2 and
  # v2_ll run the same kernels (the mode is a launch argument).
  for world in 2 4; do
    "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes --world $world --hidden 7168 \
      --topk 8 --experts-per-rank $((256 / world)) --tokens 1,128,512,4096 --gpu-per-node $((world / 2)) \
      --internode-kernel v2_ll --dtype bf16 --cache-dir "$out/warm"
  done
  # The other configurations issue 13 reports at EP2 (one per line: the model
  # shape and the op's flags), warmed here and run by the matrix check.
  ds=(--hidden 7168 --topk 8 --experts-per-rank 128)
  cat > "$out/bench-matrix.txt" <<MATRIX
${ds[*]} --dtype bf16 --combine-mode scatter
${ds[*]} --dtype bf16 --combine-mode scatter --quant fp8_direct_cast
${ds[*]} --dtype bf16 --combine-mode scatter --quant fp8_blockwise
${ds[*]} --dtype bf16 --std-moe
--hidden 4096 --topk 6 --experts-per-rank 32 --dtype bf16
MATRIX
  while read -r flags; do
    "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes --world 2 \
      --tokens 1,8,32,128,512,1024,2048,4096,8192 $flags --cache-dir "$out/warm"
  done < "$out/bench-matrix.txt"
  # A geometry sweep (the sweep check): blocks x warps for both kernels at
  # EP2 bf16 gather, small and large calls.
  : > "$out/bench-sweep.txt"
  for warps in 8 16; do
    for blocks in 16 32 66 132; do
      echo "--dispatch-blocks $blocks --dispatch-warps $warps --combine-blocks $blocks --combine-warps $warps" \
        >> "$out/bench-sweep.txt"
    done
    "$build/bin/epjit-bench" --warm-only "${on[@]}" --ranks-as processes --world 2 "${ds[@]}" \
      --dtype bf16 --tokens 1,128,4096,8192 --dispatch-warps $warps --combine-warps $warps --cache-dir "$out/warm"
  done
done
# The Python GPU test's kernels (examples/moe_layer.py's compile there: the moe-layer check).
EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/$build/lib/libepjit_kernel_source.so" PYTHONPATH="$build/python" \
  EPJIT_GPU_WARM_TARGETS="${GPU_TARGETS:-sm90}" .venv/bin/python tests/python/test_gpu.py --warm "$PWD/$out/warm" \
  > "$out/warm-python.log"
"$build/bin/epjit-warm" "$(ls "$out"/manifest-*.json | head -1)" --cache-dir "$out/warm" --export "$out/gpu.bundle" --json
rm -rf "$out/warm"
for tool in gpu_templates_test gpu_ep_test epjit-bench epjit-warm epjit-cache; do
  cp "$build/bin/$tool" "$out/" && strip "$out/$tool"
done
for world in 1 2 4; do bench_shape $world > "$out/bench-shape-$world.txt"; done
# gpu_templates_test's test kernels (not templates: test inputs), as
# NAME.TARGET.cubin or .co: ep.block_any; the weighted sum (ep.warp.sum_rows
# ... weight, DeepEP's combine bits); DeepEP's per-128 fp8 cast.
for target in "${targets[@]}"; do
  for kernel in block_vote weighted_sum deepep_cast; do
    "$build/bin/epjit-compile" --input "tests/unit/templates/inputs/$kernel.mlir" --target "$target" --emit bin \
      -o "$out/$kernel.$target.$(binary_of "$target")"
  done
done
# The compiler provider (self-contained), beside the tools that find it there:
# the GPU host compiles from the DSL what no bundle holds (the host-jit check).
strip -o "$out/libepjit_kernel_source.so" "$build/lib/libepjit_kernel_source.so"
# Header-only dependencies the GPU host lacks, to build the Python module there
# (its Python differs from this machine's).
mkdir -p "$out/deps/include"
for dir in spdlog fmt nlohmann CLI; do cp -r "/usr/include/$dir" "$out/deps/include/"; done
# A before/after of kernel changes (the ab and ab-host checks): BEFORE=<an older .gpu>
# brings its bundle and the tools built with it (the cache key includes their build).
if [[ -n ${BEFORE:-} ]]; then
  cp "$BEFORE/gpu.bundle" "$out/gpu-before.bundle"
  cp "$BEFORE/epjit-bench" "$out/epjit-bench-before"
  cp "$BEFORE/epjit-warm" "$out/epjit-warm-before"
fi
# A before/after of the Python call path (the py-ab check): BEFORE_TREE=<a
# commit> brings that tree's sources (no docs), built into a module there.
if [[ -n ${BEFORE_TREE:-} ]]; then
  git archive --format=tar.gz -o "$out/before-src.tgz" "$BEFORE_TREE" -- . ':!docs'
  git rev-parse --short=12 "$BEFORE_TREE" > "$out/before-revision"
fi
# The revision the Python module built there reports (the device copy's .git
# names another commit).
git describe --always --dirty --abbrev=12 > "$out/revision"
# The meeting microbenchmark (the meeting check): built there with the host's nvcc.
cp benchmarks/gpu/meeting_latency.cu benchmarks/gpu/cuda_check.h "$out/"
# The bulk-copy probe (the bulk check): built there with the host's nvcc.
cp benchmarks/gpu/bulk_copy_probe.cu "$out/"
# The peer comparison (the peers check): its scripts, and DeepEP's sources
# when DEEPEP_SOURCE names the archive benchmarks/peers/deepep_source.sh made.
mkdir -p "$out/peers"
cp benchmarks/peers/deep_ep_paths.py benchmarks/peers/table.py benchmarks/peers/build_deepep.sh "$out/peers/"
[[ -n ${DEEPEP_SOURCE:-} ]] && cp "$DEEPEP_SOURCE" "$out/deepep-src.tgz"
# The named checks and their driver (scripts/gpu/run --help lists them).
cp scripts/gpu/run "$out/run"
cp -r scripts/gpu/checks "$out/checks"
tar czf "$out.tgz" "$out"
du -sh "$out" "$out.tgz"
