# help: DeepEP's API on epjit: the weighted-entries and fp8 (std_moe_quant) cases of gpu_ep_test, the weighted sum and DeepEP's fp8 cast of gpu_templates_test, test_deep_ep.py (world 1, and 2-3 ranks sharing a GPU), examples/deepep_style.py at 1 and 2 ranks, and the layer's cost per round trip against the native op (benchmarks/deep_ep_overhead.py; DEEPEP_OVERHEAD_ARGS: its arguments)
timeout 200 ./gpu_templates_test --gtest_filter="${gpu_api}/GpuWeightedSum.*:${gpu_api}/GpuDeepEpCast.*" > "$logs/gpu_weighted_sum.log" 2>&1
echo "weighted sum, DeepEP cast: exit $?"; grep -E '^\[  (PASSED|FAILED) |FAILED \]' "$logs/gpu_weighted_sum.log" | tail -3
timeout 200 ./gpu_ep_test --gtest_filter="${gpu_api}/GpuEp.*entries*_w1" > "$logs/gpu_ep_entries_w1.log" 2>&1
echo "entries world 1: exit $?"; grep -E '^\[  (PASSED|FAILED) |FAILED \]' "$logs/gpu_ep_entries_w1.log" | tail -6
EPJIT_GPU_TEST_RANKS_PER_GPU=3 timeout 300 ./gpu_ep_test --gtest_filter="${gpu_api}/GpuEp.*entries*_w2:${gpu_api}/GpuEp.*entries*_w3" \
  > "$logs/gpu_ep_entries_shared.log" 2>&1
echo "entries shared: exit $?"; grep -E '^\[  (PASSED|FAILED) |FAILED \]' "$logs/gpu_ep_entries_shared.log" | tail -6
this_python_module
(cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   EPJIT_GPU_TEST_RANKS_PER_GPU=3 PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m pytest -v \
   -p no:cacheprovider -rs test_deep_ep.py 2>&1 | tee "$logs/pytest-deep-ep.log" | tail -15)
for ranks in 1 2; do
  (cd ../examples && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
     PYTHONPATH=/tmp/epjit-py/python timeout 200 python3 -m torch.distributed.run --nproc-per-node "$ranks" \
     deepep_style.py 2>&1 | grep -v '^\*\|OMP_NUM' | tail -16 | tee "$logs/deepep-style-$ranks.log")
done
(cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 deep_ep_overhead.py ${DEEPEP_OVERHEAD_ARGS:-} 2>&1 |
   tee "$logs/deep-ep-overhead.txt")
