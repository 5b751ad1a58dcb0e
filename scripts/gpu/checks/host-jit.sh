# help: a configuration no bundle holds, compiled here from the DSL by the provider beside epjit-bench
# Cold, then a second process hitting the disk cache; no EPJIT_ variable
# points at the provider (epjit-bench finds it beside itself); the identity
# check must pass.
fresh=/tmp/epjit-host-jit && rm -rf "$fresh"
for run in cold warm; do
  env -u EPJIT_KERNEL_SOURCE_LIBRARY -u EPJIT_CACHE_DIR timeout 200 ./epjit-bench $on_gpu \
    --ranks-as processes --world "$world" --hidden 6144 --topk 6 --experts-per-rank 40 --tokens 1,77,300 \
    --dtype bf16 --check-only --cache-dir "$fresh" --json "$logs/host-jit-$run.json" 2>&1 \
    | tee "$logs/host-jit-$run.txt" | grep -E 'JIT|passed|FAIL|rror'
done
