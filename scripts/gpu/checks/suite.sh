# help: the GPU suite (gpu_templates_test, gpu_ep_test) at this host's world, then the bench (bf16, fp8)
# Every kernel comes from the bundle, for this host's target ($gpu_target);
# the other vendor's instantiations (Hip/... on NVIDIA, Cuda/... on AMD) are
# skipped with the reason. Also shows the other vendor's path failing with
# its driver named (libamdhip64 on NVIDIA hosts, libcuda on AMD ones), never
# a crash.
# Reads: GPU_EP_FILTER (a gtest filter for gpu_ep_test).
other_api=Hip
[[ $gpu_api == Hip ]] && other_api=Cuda
if [[ $gpu_device == cuda ]]; then
  ./epjit-bench --device hip --target gfx942 --world 1 --tokens 1 2>&1 | tee "$logs/other-vendor-absent.txt"
else
  ./epjit-bench --device cuda --target sm90 --world 1 --tokens 1 2>&1 | tee "$logs/other-vendor-absent.txt"
fi
echo "the other vendor's bench exit ${PIPESTATUS[0]} (expected 3: the device refused, with the reason; never a crash)"
echo "the bench on this host's GPU without --target (the target read from the GPU):"
timeout 60 ./epjit-bench --device $gpu_device --ranks-as processes --world 1 --hidden 7168 --topk 8 \
  --experts-per-rank 256 --tokens 1,128 --dtype bf16 --check-only 2>&1 | tee "$logs/bench-own-target.txt"
timeout 120 ./gpu_templates_test > "$logs/gpu_templates_test.log" 2>&1
echo "gpu_templates_test exit $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |FAILED \]' "$logs/gpu_templates_test.log" | grep -v "\] $other_api/" | tail -20
echo "$(grep -c "SKIPPED \] $other_api/.* ms)$" "$logs/gpu_templates_test.log") $other_api cases skipped, the first with:"
grep -m1 -B1 "SKIPPED \] $other_api/" "$logs/gpu_templates_test.log" | head -1
timeout 300 ./gpu_ep_test ${GPU_EP_FILTER:+--gtest_filter=$GPU_EP_FILTER} > "$logs/gpu_ep_test.log" 2>&1
echo "gpu_ep_test exit $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|gave up' "$logs/gpu_ep_test.log" | grep -v "\] $other_api/" | tail -40
echo "$(grep -c "SKIPPED \] $other_api/.* ms)$" "$logs/gpu_ep_test.log") $other_api cases skipped"
for dtype in bf16 fp8; do
  timeout 100 ./epjit-bench $on_gpu --ranks-as processes $shape --dtype $dtype --graph --baselines \
    --iters 20 --warmup 3 --json "$logs/bench-$dtype.json" 2>&1 | tee "$logs/bench-$dtype.txt"
done
if (( world == 4 )); then
  timeout 100 ./epjit-bench $on_gpu --ranks-as processes $shape --dtype bf16 --combine-mode scatter \
    --graph --baselines --iters 20 --warmup 3 --json "$logs/bench-bf16-scatter.json" 2>&1 | tee "$logs/bench-bf16-scatter.txt"
fi
