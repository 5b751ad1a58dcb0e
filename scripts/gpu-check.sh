#!/usr/bin/env bash
# Prepares .gpu/, what travels to a GPU machine (which has no LLVM/MLIR): the
# stripped GPU test and epjit-warm, and a bundle of the sm90 kernels the GPU
# tests use, warmed here (NVRTC runs without a GPU). On the GPU machine:
#   cd .gpu && ./run.sh OUTDIR
# With BEFORE= (two bundles) .gpu and the tree pass the device tool's 64 MiB
# carry; .gpu.tgz (about a third of the size) travels instead:
#   carry [".gpu.tgz"]: rm -rf .gpu && tar xzf .gpu.tgz && cd .gpu && ./run.sh OUTDIR
set -euo pipefail
build=${1:-build}
out=.gpu
# The benchmark's shape: DeepSeek-V3 (256 experts) on WORLD GPUs (EP2, or EP1
# where one GPU is lent), the token sweep of issue 6.
bench_shape() {
  local world=$1
  echo --world "$world" --hidden 7168 --topk 8 --experts-per-rank $((256 / world)) \
    --tokens 1,8,32,128,512,1024,2048,4096,8192
}
rm -rf "$out" && mkdir -p "$out"
cat > "$out/manifest.json" <<'JSON'
{"targets": ["sm90"],
 "kernels": [
  {"template": "quantize_fp8_direct", "params": {"hidden": 7168}},
  {"template": "quantize_fp8_direct", "params": {"hidden": 37}},
  {"template": "quantize_fp8_blockwise", "params": {"hidden": 7168}},
  {"template": "quantize_fp8_blockwise", "params": {"hidden": 333}},
  {"template": "dequantize_fp8_direct", "params": {"hidden": 7168}},
  {"template": "dequantize_fp8_direct", "params": {"hidden": 37}},
  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 7168}},
  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 333}}]}
JSON
"$build/bin/epjit-warm" "$out/manifest.json" --cache-dir "$out/warm" --json
# The EP op's kernels: every configuration the GPU tests and the benchmark use.
EPJIT_GPU_WARM_ONLY="$PWD/$out/warm" "$build/bin/gpu_ep_test" --gtest_filter='GpuEpWarm.*' > "$out/warm-tests.log"
for world in 1 2 4; do
  for dtype in bf16 fp8; do
    "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes $(bench_shape $world) \
      --dtype "$dtype" --cache-dir "$out/warm"
  done
done
# EP1 on one GPU (EP1_MATRIX=1 in run.sh): the combines whose work is local
# (std-MoE pack and unpack, gather's and scatter's, scatter's sum) measured where no second GPU is lent.
for flags in "--std-moe" "--std-moe --combine-mode scatter" "--combine-mode scatter" \
  "--combine-mode scatter --quant fp8_direct_cast" "--std-moe --combine-mode scatter --quant fp8_direct_cast" \
  "--std-moe --combine-mode scatter --quant fp8_blockwise"; do
  "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes $(bench_shape 1) \
    --dtype bf16 $flags --cache-dir "$out/warm"
done
# The combine protocols at small calls (PROTOCOL=1 in run.sh): the
# low-latency combine and the staged one, gather and scatter, EP1 and EP2.
for world in 1 2; do
  for protocol in on off; do
    for mode in gather scatter; do
      "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes --world $world \
        --hidden 7168 --topk 8 --experts-per-rank $((256 / world)) --tokens 1,8,32,128 --dtype bf16 \
        --combine-mode $mode --low-latency-combine $protocol --cache-dir "$out/warm"
    done
  done
done
# EP4 (issue 17) also times scatter combine.
"$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes $(bench_shape 4) \
  --dtype bf16 --combine-mode scatter --cache-dir "$out/warm"
# Internode (issue 16): two nodes of one GPU (EP2) and of two (EP4); v2 and
# v2_ll run the same kernels (the mode is a launch argument).
for world in 2 4; do
  "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes --world $world --hidden 7168 \
    --topk 8 --experts-per-rank $((256 / world)) --tokens 1,128,512,4096 --gpu-per-node $((world / 2)) \
    --internode-kernel v2_ll --dtype bf16 --cache-dir "$out/warm"
done
# The other configurations issue 13 reports at EP2 (one per line: the model
# shape and the op's flags), warmed here and run by run.sh with MATRIX=1.
ds=(--hidden 7168 --topk 8 --experts-per-rank 128)
cat > "$out/bench-matrix.txt" <<MATRIX
${ds[*]} --dtype bf16 --combine-mode scatter
${ds[*]} --dtype bf16 --combine-mode scatter --quant fp8_direct_cast
${ds[*]} --dtype bf16 --combine-mode scatter --quant fp8_blockwise
${ds[*]} --dtype bf16 --std-moe
--hidden 4096 --topk 6 --experts-per-rank 32 --dtype bf16
MATRIX
while read -r flags; do
  "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes --world 2 \
    --tokens 1,8,32,128,512,1024,2048,4096,8192 $flags --cache-dir "$out/warm"
done < "$out/bench-matrix.txt"
# A geometry sweep (SWEEP=1 in run.sh): blocks x warps for both kernels at
# EP2 bf16 gather, small and large calls.
: > "$out/bench-sweep.txt"
for warps in 8 16; do
  for blocks in 16 32 66 132; do
    echo "--dispatch-blocks $blocks --dispatch-warps $warps --combine-blocks $blocks --combine-warps $warps" \
      >> "$out/bench-sweep.txt"
  done
  "$build/bin/epjit-bench" --warm-only --target sm90 --device cuda --ranks-as processes --world 2 "${ds[@]}" \
    --dtype bf16 --tokens 1,128,4096,8192 --dispatch-warps $warps --combine-warps $warps --cache-dir "$out/warm"
done
# The Python GPU test's kernels, and examples/moe_layer.py's (EP2, DeepSeek-V3's MoE).
EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/$build/lib/libepjit_kernel_source.so" PYTHONPATH="$build/python" \
  .venv/bin/python tests/python/test_gpu.py --warm "$PWD/$out/warm" > "$out/warm-python.log"
EPJIT_CACHE_DIR="$PWD/$out/warm" EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/$build/lib/libepjit_kernel_source.so" \
  PYTHONPATH="$build/python:examples" .venv/bin/python -c "import epjit, moe_layer
print(epjit.cache.warm_op(moe_layer.config_for(moe_layer.Shape(2, 7168, 2048, 256, 8, 4096), 0, 'sm90')))" \
  >> "$out/warm-python.log"
"$build/bin/epjit-warm" "$out/manifest.json" --cache-dir "$out/warm" --export "$out/sm90.bundle" --json
rm -rf "$out/warm"
for tool in gpu_templates_test gpu_ep_test epjit-bench epjit-warm epjit-cache; do
  cp "$build/bin/$tool" "$out/" && strip "$out/$tool"
done
for world in 1 2 4; do bench_shape $world > "$out/bench-shape-$world.txt"; done
# gpu_templates_test's ep.block_any kernel (not a template: a test input).
"$build/bin/epjit-compile" --input tests/unit/templates/inputs/block_vote.mlir --target sm90 --emit bin \
  -o "$out/block_vote.cubin"
# The compiler provider (self-contained), beside the tools that find it there:
# the GPU host compiles from the DSL what no bundle holds (HOST_JIT=1 in run.sh).
strip -o "$out/libepjit_kernel_source.so" "$build/lib/libepjit_kernel_source.so"
# Header-only dependencies the GPU host lacks, to build the Python module there
# (its Python differs from this machine's).
mkdir -p "$out/deps/include"
for dir in spdlog fmt nlohmann CLI; do cp -r "/usr/include/$dir" "$out/deps/include/"; done
# A before/after of kernel changes (AB=1 in run.sh): BEFORE=<an older .gpu>
# brings its bundle and the tools built with it (the cache key includes their build).
if [[ -n ${BEFORE:-} ]]; then
  cp "$BEFORE/sm90.bundle" "$out/sm90-before.bundle"
  cp "$BEFORE/epjit-bench" "$out/epjit-bench-before"
  cp "$BEFORE/epjit-warm" "$out/epjit-warm-before"
fi
# A before/after of the Python call path (PY_AB=1 in run.sh): BEFORE_TREE=<a
# commit> brings that tree's sources (no docs), built into a module there.
if [[ -n ${BEFORE_TREE:-} ]]; then
  git archive --format=tar.gz -o "$out/before-src.tgz" "$BEFORE_TREE" -- . ':!docs'
  git rev-parse --short=12 "$BEFORE_TREE" > "$out/before-revision"
fi
# The revision the Python module built there reports (the device copy's .git
# names another commit).
git describe --always --dirty --abbrev=12 > "$out/revision"
# The meeting microbenchmark (MEETING=1 in run.sh): built there with the host's nvcc.
cp benchmarks/gpu/meeting_latency.cu benchmarks/gpu/cuda_check.h "$out/"
# The bulk-copy probe (BULK=1 in run.sh): built there with the host's nvcc.
cp benchmarks/gpu/bulk_copy_probe.cu "$out/"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: import the warmed kernels, then run the GPU tests with
# no compiler reachable (every kernel must come from the bundle).
set -uo pipefail
logs=${1:-.}
mkdir -p "$logs"
cache=/tmp/epjit-gpu-cache
rm -rf "$cache"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
# The AMD path where there is no HIP runtime: a clear error naming libamdhip64, not a crash.
./epjit-bench --device hip --target gfx942 --world 1 --tokens 1 2>&1 | tee "$logs/hip-absent.txt"
./epjit-warm --import sm90.bundle --cache-dir "$cache" --json | tee "$logs/import.json"
./epjit-cache --cache-dir "$cache" verify | tee "$logs/verify.txt"
export EPJIT_CACHE_DIR=$cache EPJIT_KERNEL_SOURCE_LIBRARY=/nonexistent
# EP4 where four GPUs are lent (issue 17), EP2 where two are, else EP1.
world=$(nvidia-smi -L | wc -l)
(( world > 4 )) && world=4
(( world == 3 )) && world=2
shape=$(cat bench-shape-$world.txt)
# SWEEP=1: only the geometry sweep at EP2 (bench-sweep.txt), then stop.
if [[ ${SWEEP:-0} == 1 ]]; then
  n=0
  while read -r flags; do
    n=$((n + 1))
    timeout 60 ./epjit-bench --target sm90 --device cuda --ranks-as processes --world 2 --hidden 7168 --topk 8 \
      --experts-per-rank 128 --dtype bf16 --tokens 1,128,4096,8192 $flags --iters 20 --warmup 3 \
      > "$logs/sweep-$n.txt" 2>&1
    echo "sweep $n ($flags): exit $?"; grep -E '^ +[0-9]+ ' "$logs/sweep-$n.txt"
  done < bench-sweep.txt
  exit 0
fi
# AB=1 and AB_HOST=1 (with BEFORE= at preparation) compare the older
# bundle and tools with these, alternated; then stop. Each side's bench and
# cache:
side_bench() { if [[ $1 == before ]]; then echo ./epjit-bench-before; else echo ./epjit-bench; fi; }
side_cache() { if [[ $1 == before ]]; then echo /tmp/cache-before; else echo "$cache"; fi; }
if [[ ${AB:-0} == 1 || ${AB_HOST:-0} == 1 ]]; then
  ./epjit-warm-before --import sm90-before.bundle --cache-dir /tmp/cache-before --json > /dev/null || exit 1
fi
# AB=1: each kernel's own time on the GPU (ncu medians), two passes, at EP1
# and 1 / 8 / 128 / 8192 tokens (AB_TOKENS: other counts, the last 8192: the
# bundle holds the kernels of that max_tokens). AB_FLAGS: more epjit-bench flags, several
# sets separated by ';' (e.g. "; --combine-mode scatter"), each a case of its
# own (logs ncu-cN-SIDE-PASS.txt).
if [[ ${AB:-0} == 1 ]]; then
  IFS=';' read -r -a cases <<< "${AB_FLAGS:-}"
  (( ${#cases[@]} == 0 )) && cases=("")
  for n in "${!cases[@]}"; do
    for pass in 1 2; do
      for side in before after; do
        EPJIT_CACHE_DIR=$(side_cache $side) timeout 200 ncu --cache-control none --clock-control none -k regex:ep_ \
          --metrics gpu__time_duration.sum $(side_bench $side) --target sm90 --device cuda --ranks-as processes \
          --world 1 --hidden 7168 --topk 8 --experts-per-rank 256 --tokens ${AB_TOKENS:-1,8,128,8192} --dtype bf16 --iters 20 \
          --warmup 3 ${cases[$n]} 2>&1 | grep -E "^  ep_|gpu__time|error" > "$logs/ncu-c$n-$side-$pass.txt"
        echo "case $n (${cases[$n]}), $side, pass $pass: $(grep -c gpu__time "$logs/ncu-c$n-$side-$pass.txt") kernels timed"
      done
    done
  done
  exit 0
fi
# AB_HOST=1: the eager legs of small calls as a user times them, three
# passes at EP1 (host-side changes show here, not in ncu), for each case of
# AB_FLAGS as AB=1 takes them (logs host-cN-SIDE-PASS). AB_WORLD=2 (on
# nvidia-h200-x2) times EP2 instead, where ncu cannot (its kernels wait for
# their peer's): the before/after of a change whose point is a remote round trip.
if [[ ${AB_HOST:-0} == 1 ]]; then
  IFS=';' read -r -a cases <<< "${AB_FLAGS:-}"
  (( ${#cases[@]} == 0 )) && cases=("")
  ab_world=${AB_WORLD:-1}
  for n in "${!cases[@]}"; do
    for pass in 1 2 3; do
      for side in before after; do
        EPJIT_CACHE_DIR=$(side_cache $side) timeout 100 $(side_bench $side) --target sm90 --device cuda \
          --ranks-as processes --world $ab_world --hidden 7168 --topk 8 --experts-per-rank $((256 / ab_world)) \
          --tokens 1,8,128,8192 \
          --dtype bf16 --iters 500 --warmup 20 ${cases[$n]} --json "$logs/host-c$n-$side-$pass.json" \
          > "$logs/host-c$n-$side-$pass.txt" 2>&1
        echo "case $n (${cases[$n]}), $side, pass $pass: exit $?"; grep -E '^ +[0-9]+ ' "$logs/host-c$n-$side-$pass.txt" | head -4
      done
    done
  done
  exit 0
fi
# PROTOCOL=1: the low-latency combine against the staged one at 1 to 128
# tokens, the same binaries and bundle: each kernel's time (ncu, EP1, two
# passes), then the legs as a user times them, eager and from graphs (three
# passes, alternated); PROTOCOL_WORLD=2 (nvidia-h200-x2) times EP2 only.
# PROTOCOL_FLAGS: more epjit-bench flags (e.g. --combine-mode scatter).
if [[ ${PROTOCOL:-0} == 1 ]]; then
  pworld=${PROTOCOL_WORLD:-1}
  pflags=(--target sm90 --device cuda --ranks-as processes --world $pworld --hidden 7168 --topk 8
          --experts-per-rank $((256 / pworld)) --tokens 1,8,32,128 --dtype bf16 ${PROTOCOL_FLAGS:-})
  if (( pworld == 1 )); then
    for pass in 1 2; do
      for protocol in off on; do
        timeout 200 ncu --cache-control none --clock-control none -k regex:ep_ --metrics gpu__time_duration.sum \
          ./epjit-bench "${pflags[@]}" --low-latency-combine $protocol --iters 20 --warmup 3 2>&1 \
          | grep -E "^  ep_|gpu__time|error" > "$logs/ncu-$protocol-$pass.txt"
        echo "ncu $protocol pass $pass: $(grep -c gpu__time "$logs/ncu-$protocol-$pass.txt") kernels timed"
      done
    done
  fi
  for pass in 1 2 3; do
    for protocol in off on; do
      timeout 150 ./epjit-bench "${pflags[@]}" --low-latency-combine $protocol --iters 500 --warmup 20 --graph \
        --json "$logs/host-$protocol-$pass.json" > "$logs/host-$protocol-$pass.txt" 2>&1
      echo "$protocol pass $pass: exit $?"; grep -E '^ +[0-9]+ ' "$logs/host-$protocol-$pass.txt" | head -8
    done
  done
  exit 0
fi
# MEETING=1: what a meeting and its steps cost on this GPU, apart from any EP
# kernel (benchmarks/gpu/meeting_latency.cu), twice; then stop.
if [[ ${MEETING:-0} == 1 ]]; then
  nvcc -O3 -arch=sm_90 -o meeting_latency meeting_latency.cu || exit 1
  for pass in 1 2; do ./meeting_latency | tee "$logs/meeting-$pass.txt"; done
  exit 0
fi
# BULK=1: dispatch's row copies as the templates do them against Hopper's
# bulk copy engine, into this GPU and, with two GPUs, into GPU 1 over NVLink
# (benchmarks/gpu/bulk_copy_probe.cu), twice; then stop.
if [[ ${BULK:-0} == 1 ]]; then
  nvcc -O3 -arch=sm_90 -o bulk_copy_probe bulk_copy_probe.cu || exit 1
  for pass in 1 2; do ./bulk_copy_probe | tee "$logs/bulk-$pass.txt"; done
  exit 0
fi
# The Python module for this host's Python, from the sources in $1, built in
# $2 (logs py-$3-*.log), reporting revision $4.
python_module() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPJIT_BUILD_COMPILER=OFF -DEPJIT_BUILD_TESTS=OFF \
    -DEPJIT_REVISION="$4" -DEPJIT_HEADER_DEPS_DIR="$PWD/deps" -DPython_EXECUTABLE="$(command -v python3)" \
    -DEPJIT_TEST_PYTHON="$(command -v python3)" > "$logs/py-$3-configure.log" 2>&1 &&
    ninja -C "$2" _epjit > "$logs/py-$3-build.log" 2>&1
}
# PY_AB=1 (with BEFORE_TREE= at preparation): the Python call path of the
# older tree against this one, each module built here; what a round trip
# costs from Python (benchmarks/mori_overhead.py: epjit's op and epjit.mori,
# default and side stream; PY_AB_ARGS: its arguments, e.g. "--tokens 1,8192"),
# three passes alternated; then the Python GPU
# tests on this tree's module with two rank processes per GPU (world 2 on one
# GPU: the multi-rank Python paths, time-sliced; test_gpu.py also at world 1),
# then stop. Kernels compile here from the DSL with the provider beside this
# script. That provider is this tree's: a before tree with the provider
# identity check (862e864 on) refuses it, and one without it gets this tree's
# kernels, so A/B only host-side changes of trees whose templates agree.
if [[ ${PY_AB:-0} == 1 ]]; then
  rm -rf /tmp/before-src && mkdir -p /tmp/before-src && tar xzf before-src.tgz -C /tmp/before-src || exit 1
  python_module .. /tmp/epjit-py after "$(cat revision)" &
  python_module /tmp/before-src /tmp/epjit-py-before before "$(cat before-revision)" &
  wait
  ls /tmp/epjit-py/python/epjit/_epjit*.so /tmp/epjit-py-before/python/epjit/_epjit*.so || exit 1
  for pass in 1 2 3; do
    for side in before after; do
      dir=/tmp/epjit-py; [[ $side == before ]] && dir=/tmp/epjit-py-before
      EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/libepjit_kernel_source.so" EPJIT_CACHE_DIR=/tmp/epjit-py-ab-cache-$side \
        PYTHONPATH=$dir/python timeout 200 python3 ../benchmarks/mori_overhead.py ${PY_AB_ARGS:-} \
        > "$logs/py-overhead-$side-$pass.txt" 2>&1
      echo "$side, pass $pass: exit $?"; cat "$logs/py-overhead-$side-$pass.txt"
    done
  done
  # PY_AB_PROFILE=1: where a one-token round trip's time goes, this tree's module.
  if [[ ${PY_AB_PROFILE:-0} == 1 ]]; then
    EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/libepjit_kernel_source.so" EPJIT_CACHE_DIR=/tmp/epjit-py-ab-cache-after \
      PYTHONPATH=/tmp/epjit-py/python timeout 200 python3 ../benchmarks/mori_overhead.py --tokens 1 --iters 2000 \
      --profile 2>&1 | grep -vE '^ *$|Ordered by|List reduced'
  fi
  (cd ../tests/python && PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m pytest -q -p no:cacheprovider \
     test_gpu.py 2>&1 | tail -3 | tee "$logs/pytest-gpu.log")
  (cd ../tests/python && EPJIT_GPU_TEST_RANKS_PER_GPU=2 PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m pytest \
     -v -p no:cacheprovider -rs test_gpu.py 2>&1 | tail -12 | tee "$logs/pytest-gpu-shared.log")
  (cd ../tests/python && EPJIT_GPU_TEST_RANKS_PER_GPU=2 EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/../../.gpu/libepjit_kernel_source.so" \
     EPJIT_CACHE_DIR=/tmp/epjit-mori-cache PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m pytest -v \
     -p no:cacheprovider -rs test_mori.py 2>&1 | tail -16 | tee "$logs/pytest-mori-shared.log")
  exit 0
fi
# SHARED=1: the multi-rank protocol where fewer GPUs are lent than ranks
# (EPJIT_GPU_TEST_RANKS_PER_GPU): gpu_ep_test's world 2 to 4 cases, graph
# replays (world 4), the peer timeout and the internode cases of two GPUs
# per node over the host transport with up to 4 rank processes per GPU, then
# the 10,000-call stress at world 2; then stop. The GPU time-slices the rank
# processes' contexts, so a rank's grid is resident alone and a meeting waits
# for the peers' slices (a call takes milliseconds: one GPU's memory model,
# nothing about NVLink or speed). SHARED_MPS=1 runs them side by side under
# MPS instead, each rank held to SHARED_MPS_PERCENT of the SMs (default 25),
# and adds epjit-bench --ranks-per-gpu 2 at EP2; MPS does not keep every
# rank's grid resident at once (worlds 3 and 4 then time out at meetings),
# and a client killed by the timeout leaves the server failing new contexts.
if [[ ${SHARED:-0} == 1 ]]; then
  if [[ ${SHARED_MPS:-0} == 1 ]]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/epjit-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/epjit-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || exit 1
    export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${SHARED_MPS_PERCENT:-25}
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
  fi
  EPJIT_GPU_TEST_RANKS_PER_GPU=4 timeout ${SHARED_TIMEOUT:-300} ./gpu_ep_test \
    --gtest_filter="${SHARED_FILTER:-Sm90/GpuEp.*_w2:Sm90/GpuEp.*_w3:Sm90/GpuEp.*_w4:*GraphReplay*:GpuEpTimeout.*:*Internode*host_w4_g2*}" \
    > "$logs/gpu_ep_shared.log" 2>&1
  echo "gpu_ep_test shared (4 ranks per GPU) exit $?"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |FAILED \]' "$logs/gpu_ep_shared.log" | tail -40
  EPJIT_GPU_TEST_RANKS_PER_GPU=2 timeout 300 ./gpu_ep_test --gtest_filter='*Stress*' > "$logs/gpu_ep_shared_stress.log" 2>&1
  echo "gpu_ep_test shared stress (2 ranks per GPU) exit $?"
  grep -E 'OK \]|FAILED \]' "$logs/gpu_ep_shared_stress.log"
  if [[ ${SHARED_MPS:-0} == 1 ]]; then
    for protocol in off on; do
      timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes --ranks-per-gpu 2 --world 2 \
        --hidden 7168 --topk 8 --experts-per-rank 128 --tokens 1,8,32,128 --dtype bf16 --low-latency-combine $protocol \
        --iters 200 --warmup 20 --graph --json "$logs/shared-bench-$protocol.json" > "$logs/shared-bench-$protocol.txt" 2>&1
      echo "EP2 on one GPU under MPS, low-latency combine $protocol: exit $?"; grep -E '^ +[0-9]+ ' "$logs/shared-bench-$protocol.txt"
    done
  fi
  exit 0
fi
# PDL=1: programmatic dependent launch off and on, twice each (A/B/A/B), on
# the bench's shape at this host's world: the round trip (dispatch then
# combine back to back) is where the overlap can show.
if [[ ${PDL:-0} == 1 ]]; then
  for pass in 1 2; do
    for pdl in 0 1; do
      EPJIT_DEPENDENT_LAUNCH=$pdl timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape \
        --dtype bf16 --graph --iters 50 --warmup 5 --json "$logs/pdl$pdl-$pass.json" > "$logs/pdl$pdl-$pass.txt" 2>&1
      echo "dependent launch $pdl, pass $pass: exit $?"; grep -E '^ +[0-9]+ ' "$logs/pdl$pdl-$pass.txt"
    done
  done
  [[ ${PDL_ONLY:-0} == 1 ]] && exit 0
fi
# EP1_MATRIX=1: gather, std-MoE and scatter at EP1 on this host's first GPU, then stop.
if [[ ${EP1_MATRIX:-0} == 1 ]]; then
  n=0
  for flags in "" "--std-moe" "--std-moe --combine-mode scatter" "--combine-mode scatter" \
    "--combine-mode scatter --quant fp8_direct_cast" "--std-moe --combine-mode scatter --quant fp8_direct_cast" \
    "--std-moe --combine-mode scatter --quant fp8_blockwise"; do
    n=$((n + 1))
    CUDA_VISIBLE_DEVICES=0 timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes \
      $(cat bench-shape-1.txt) --dtype bf16 $flags --graph --iters 20 --warmup 3 --json "$logs/ep1-$n.json" \
      > "$logs/ep1-$n.txt" 2>&1
    echo "EP1 ${flags:-gather}: exit $?"; grep -E '^ +[0-9]+ ' "$logs/ep1-$n.txt"
  done
  exit 0
fi
# MATRIX=1: only the issue-13 matrix at EP2 (bench-matrix.txt), then stop.
if [[ ${MATRIX:-0} == 1 ]]; then
  n=0
  while read -r flags; do
    n=$((n + 1))
    timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes --world 2 \
      --tokens 1,8,32,128,512,1024,2048,4096,8192 $flags \
      --graph --baselines --iters 20 --warmup 3 --json "$logs/matrix-$n.json" > "$logs/matrix-$n.txt" 2>&1
    echo "matrix $n ($flags): exit $?"
  done < bench-matrix.txt
  exit 0
fi
# INTERNODE=1: only the internode checks (issue 16), then stop. The GPU
# suite's internode cases (the host transport where GPUs are shared; NCCL
# with one GPU per rank), and, where two or more GPUs are lent, epjit-bench
# as two nodes with NCCL forced onto its socket transport, next to NCCL's
# all-to-all of the same bytes over the same transport.
if [[ ${INTERNODE:-0} == 1 ]]; then
  export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO
  timeout 400 ./gpu_ep_test --gtest_filter='*Internode*' > "$logs/gpu_ep_internode.log" 2>&1
  echo "gpu_ep_test internode exit $?"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|SKIPPED \]' "$logs/gpu_ep_internode.log" | tail -60
  grep -E 'NET/|via NET|Using network|NCCL INFO Channel 00' "$logs/gpu_ep_internode.log" | sort | uniq -c | head -12 \
    | tee "$logs/nccl-transport.txt"
  if (( world >= 2 )); then
    for kernel in v2_ll v2 auto; do
      timeout 150 ./epjit-bench --target sm90 --device cuda --ranks-as processes --world "$world" --hidden 7168 \
        --topk 8 --experts-per-rank $((256 / world)) --tokens 1,128,512,4096 --gpu-per-node $((world / 2)) \
        --internode-kernel $kernel --dtype bf16 --baselines --graph --iters 20 --warmup 3 \
        --json "$logs/internode-$kernel.json" > "$logs/internode-$kernel.txt" 2>&1
      echo "internode bench $kernel: exit $?"; grep -vE 'NCCL INFO' "$logs/internode-$kernel.txt" | tail -12
      grep -E 'NET/Socket|via NET' "$logs/internode-$kernel.txt" | head -4
    done
  fi
  exit 0
fi
# JIT latency on this host: a cache holding only the bundle's sources makes
# every kernel a cold NVRTC compile (no epjit compiler here); the next run hits disk.
jit=/tmp/epjit-jit-cache
rm -rf "$jit" && cp -r "$cache" "$jit" && rm -rf "$jit/entries"
for run in cold warm; do
  timeout 120 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape --dtype bf16 --check-only \
    --cache-dir "$jit" --json "$logs/jit-$run.json" 2>&1 | grep -E 'JIT|passed|FAILED|error' | head -3 | tee "$logs/jit-$run.txt"
done
[[ ${JIT_ONLY:-0} == 1 ]] && exit 0
# HOST_JIT=1: a configuration no bundle holds, compiled here from the DSL by
# the provider beside epjit-bench (no EPJIT_ variable points at it): cold,
# then a second process hitting the disk cache; the identity check must pass.
if [[ ${HOST_JIT:-0} == 1 ]]; then
  fresh=/tmp/epjit-host-jit && rm -rf "$fresh"
  for run in cold warm; do
    env -u EPJIT_KERNEL_SOURCE_LIBRARY -u EPJIT_CACHE_DIR timeout 200 ./epjit-bench --target sm90 --device cuda \
      --ranks-as processes --world "$world" --hidden 6144 --topk 6 --experts-per-rank 40 --tokens 1,77,300 --dtype bf16 \
      --check-only --cache-dir "$fresh" --json "$logs/host-jit-$run.json" 2>&1 | tee "$logs/host-jit-$run.txt" | grep -E 'JIT|passed|FAIL|rror'
  done
  exit 0
fi
# The Python module, built here for this host's Python, then its GPU tests with torch.
if [[ ${PY:-1} == 1 ]]; then
  py=$(command -v python3)
  (cd .. && cmake -S . -B /tmp/epjit-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPJIT_BUILD_COMPILER=OFF \
     -DEPJIT_BUILD_TESTS=OFF -DEPJIT_REVISION="$(cat .gpu/revision)" -DEPJIT_HEADER_DEPS_DIR="$PWD/.gpu/deps" \
     -DPython_EXECUTABLE="$py" \
     -DEPJIT_TEST_PYTHON="$py" > "$logs/py-configure.log" 2>&1 && ninja -C /tmp/epjit-py _epjit > "$logs/py-build.log" 2>&1)
  echo "python module build exit $?"; tail -3 "$logs/py-build.log"
  (cd ../tests/python && PYTHONPATH=/tmp/epjit-py/python timeout 300 "$py" -m pytest -q -p no:cacheprovider test_gpu.py 2>&1 | tail -15 | tee "$logs/pytest-gpu.log")
  # epjit.mori (MORI's API) on CUDA and host ranks; its kernels compile here
  # from the DSL with the provider beside this script (a wheel carries it alike).
  (cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/../../.gpu/libepjit_kernel_source.so" \
     EPJIT_CACHE_DIR=/tmp/epjit-mori-cache PYTHONPATH=/tmp/epjit-py/python timeout 400 "$py" -m pytest -v \
     -p no:cacheprovider -rs test_mori.py 2>&1 | tail -15 | tee "$logs/pytest-mori.log")
  # OVERHEAD=1: what a round trip costs from Python at this host's world
  # (benchmarks/mori_overhead.py, rank 0's times; OVERHEAD_ARGS: its arguments,
  # e.g. "--tokens 1,2048"). OVERHEAD_RANKS_PER_GPU=2 runs two rank processes
  # per GPU (world 2 on one H200): a check of the script, not a number.
  if [[ ${OVERHEAD:-0} == 1 ]]; then
    per_gpu=${OVERHEAD_RANKS_PER_GPU:-1}
    (cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/../.gpu/libepjit_kernel_source.so" \
       EPJIT_CACHE_DIR=/tmp/epjit-mori-cache PYTHONPATH=/tmp/epjit-py/python timeout 400 "$py" mori_overhead.py \
       --world $((world * per_gpu)) --ranks-per-gpu "$per_gpu" ${OVERHEAD_ARGS:-} 2>&1 | tee "$logs/mori-overhead.txt")
  fi
  # MORI=1: examples/mori_style.py, a MORI program, unchanged after epjit.mori.install(), one rank per GPU.
  if [[ ${MORI:-0} == 1 ]]; then
    (cd ../examples && EPJIT_KERNEL_SOURCE_LIBRARY="$PWD/../.gpu/libepjit_kernel_source.so" \
       EPJIT_CACHE_DIR=/tmp/epjit-mori-cache PYTHONPATH=/tmp/epjit-py/python timeout 300 "$py" -m torch.distributed.run \
       --nproc-per-node "$world" mori_style.py 2>&1 | tail -20 | tee "$logs/mori-style.log")
  fi
  # MOE=1: examples/moe_layer.py against all_to_all_single over NCCL, 2 GPUs.
  if [[ ${MOE:-0} == 1 ]]; then
    (cd ../examples && PYTHONPATH=/tmp/epjit-py/python timeout 400 "$py" -m torch.distributed.run --nproc-per-node 2 \
       moe_layer.py --torch --tokens 128,4096 --json "$logs/moe-layer.json" 2>&1 | tail -20 | tee "$logs/moe-layer.log")
  fi
fi
[[ ${PY_ONLY:-0} == 1 ]] && exit 0
timeout 60 ./gpu_templates_test 2>&1 | tail -5 | tee "$logs/gpu_templates_test.log"
timeout 300 ./gpu_ep_test ${GPU_EP_FILTER:+--gtest_filter=$GPU_EP_FILTER} > "$logs/gpu_ep_test.log" 2>&1
echo "gpu_ep_test exit $?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|gave up' "$logs/gpu_ep_test.log" | tail -40
for dtype in bf16 fp8; do
  timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape --dtype $dtype --graph --baselines \
    --iters 20 --warmup 3 --json "$logs/bench-$dtype.json" 2>&1 | tee "$logs/bench-$dtype.txt"
done
if (( world == 4 )); then
  timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape --dtype bf16 --combine-mode scatter \
    --graph --baselines --iters 20 --warmup 3 --json "$logs/bench-bf16-scatter.json" 2>&1 | tee "$logs/bench-bf16-scatter.txt"
fi
RUN
chmod +x "$out/run.sh"
tar czf .gpu.tgz "$out"
du -sh "$out" .gpu.tgz
