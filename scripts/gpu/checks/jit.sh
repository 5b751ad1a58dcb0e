# help: JIT latency here: every kernel a cold NVRTC compile from the bundle's sources, then a disk hit
jit=/tmp/epjit-jit-cache
rm -rf "$jit" && cp -r "$cache" "$jit" && rm -rf "$jit/entries"
for run in cold warm; do
  timeout 120 ./epjit-bench $on_gpu --ranks-as processes $shape --dtype bf16 --check-only \
    --cache-dir "$jit" --json "$logs/jit-$run.json" 2>&1 | grep -E 'JIT|passed|FAILED|error' | head -3 \
    | tee "$logs/jit-$run.txt"
done
