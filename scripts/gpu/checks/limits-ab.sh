# help: the op's limits read at run time (one module for every limit) against compiled in (EPJIT_SPECIALIZE_LIMITS=1), EP1
# Each kernel's own time (ncu medians, two alternating passes per side) and
# the bench's dispatch / combine / round trip in graphs, at 1 / 128 / 4096
# tokens, bf16 gather and scatter with fp8 blockwise quant. The compiled-in
# side compiles here through the provider (NVRTC); the runtime side runs the
# bundle. Logs ncu-limits-CASE-SIDE-PASS.txt (scripts/ncu-medians.py reads
# them) and bench-limits-CASE-SIDE.json.
# Reads: LIMITS_TOKENS (default 1,128,4096).
tokens=${LIMITS_TOKENS:-1,128,4096}
jit_cache=/tmp/epjit-limits-cache
rm -rf "$jit_cache"
side_env() {
  if [[ $1 == constants ]]; then
    echo EPJIT_SPECIALIZE_LIMITS=1 EPJIT_CACHE_DIR=$jit_cache EPJIT_KERNEL_SOURCE_LIBRARY=$provider
  else
    echo EPJIT_SPECIALIZE_LIMITS=0
  fi
}
n=0
for flags in "" "--combine-mode scatter --quant fp8_blockwise"; do
  n=$((n + 1))
  common=($on_gpu --ranks-as processes --world 1 --hidden 7168 --topk 8 --experts-per-rank 256
          --tokens "$tokens" --dtype bf16 $flags)
  for pass in 1 2; do
    for side in runtime constants; do
      env $(side_env $side) CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --cache-control none --clock-control none \
        -k regex:ep_ --metrics gpu__time_duration.sum ./epjit-bench "${common[@]}" --iters 20 --warmup 3 2>&1 |
        grep -E "^  ep_|gpu__time|error" > "$logs/ncu-limits-c$n-$side-$pass.txt"
      echo "case $n (${flags:-gather}), $side, pass $pass: $(grep -c gpu__time "$logs/ncu-limits-c$n-$side-$pass.txt") kernels timed"
    done
  done
  for side in runtime constants; do
    env $(side_env $side) CUDA_VISIBLE_DEVICES=0 timeout 120 ./epjit-bench "${common[@]}" --graph --iters 50 \
      --warmup 5 --json "$logs/bench-limits-c$n-$side.json" > "$logs/bench-limits-c$n-$side.txt" 2>&1
    echo "bench case $n ${flags:-gather} $side: exit $?"
    grep -E '^ +[0-9]+ ' "$logs/bench-limits-c$n-$side.txt"
  done
done
