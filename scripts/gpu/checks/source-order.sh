# help: receive_order source (DeepEP's order): its gpu_ep_test cases at world 1 and with 2-4 rank processes sharing the GPU, and its cost against arrival order at EP1 (bf16, eager and graph)
# The cases check every received row's place against the reference; the
# bench runs the same shape both ways, one after the other on this GPU.
timeout 200 ./gpu_ep_test --gtest_filter="${gpu_api}/GpuEp.*source_order*_w1" > "$logs/gpu_ep_source_order_w1.log" 2>&1
echo "world 1: exit $?"
grep -E '^\[  (PASSED|FAILED) |FAILED \]' "$logs/gpu_ep_source_order_w1.log" | tail -10
EPJIT_GPU_TEST_RANKS_PER_GPU=4 timeout 300 ./gpu_ep_test --gtest_filter="${gpu_api}/GpuEp.*source_order*_w2:${gpu_api}/GpuEp.*source_order*_w3:${gpu_api}/GpuEp.*source_order*_w4" \
  > "$logs/gpu_ep_source_order_shared.log" 2>&1
echo "shared: exit $?"
grep -E '^\[  (PASSED|FAILED) |FAILED \]' "$logs/gpu_ep_source_order_shared.log" | tail -10
for order in arrival source; do
  timeout 100 ./epjit-bench $on_gpu --ranks-as processes $(cat bench-shape-1.txt) --dtype bf16 \
    --receive-order $order --graph --iters 20 --warmup 3 --json "$logs/bench-order-$order.json" 2>&1 |
    tee "$logs/bench-order-$order.txt" | tail -13
done
