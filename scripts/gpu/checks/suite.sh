# help: the GPU suite (gpu_templates_test, gpu_ep_test) at this host's world, then the bench (bf16, fp8)
# Every kernel comes from the bundle. Also shows the AMD path's error where
# no HIP runtime is installed (it must name libamdhip64, never crash).
# Reads: GPU_EP_FILTER (a gtest filter for gpu_ep_test).
./epjit-bench --device hip --target gfx942 --world 1 --tokens 1 2>&1 | tee "$logs/hip-absent.txt"
timeout 60 ./gpu_templates_test 2>&1 | tail -5 | tee "$logs/gpu_templates_test.log"
timeout 300 ./gpu_ep_test ${GPU_EP_FILTER:+--gtest_filter=$GPU_EP_FILTER} > "$logs/gpu_ep_test.log" 2>&1
echo "gpu_ep_test exit $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|gave up' "$logs/gpu_ep_test.log" | tail -40
for dtype in bf16 fp8; do
  timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape --dtype $dtype --graph --baselines \
    --iters 20 --warmup 3 --json "$logs/bench-$dtype.json" 2>&1 | tee "$logs/bench-$dtype.txt"
done
if (( world == 4 )); then
  timeout 100 ./epjit-bench --target sm90 --device cuda --ranks-as processes $shape --dtype bf16 --combine-mode scatter \
    --graph --baselines --iters 20 --warmup 3 --json "$logs/bench-bf16-scatter.json" 2>&1 | tee "$logs/bench-bf16-scatter.txt"
fi
