# help: the internode cases (gpu_ep_test), and with 2+ GPUs epjit-bench as two nodes over NCCL's sockets
# NCCL is forced onto its socket transport (no P2P, no SHM); the bench runs
# v2_ll, v2 and auto next to NCCL's all-to-all of the same bytes.
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO
timeout 400 ./gpu_ep_test --gtest_filter="${gpu_api}/*Internode*" > "$logs/gpu_ep_internode.log" 2>&1
echo "gpu_ep_test internode exit $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|SKIPPED \]' "$logs/gpu_ep_internode.log" | tail -60
grep -E 'NET/|via NET|Using network|NCCL INFO Channel 00' "$logs/gpu_ep_internode.log" | sort | uniq -c | head -12 \
  | tee "$logs/nccl-transport.txt"
if (( world >= 2 )); then
  for kernel in v2_ll v2 auto; do
    timeout 150 ./epjit-bench $on_gpu --ranks-as processes --world "$world" --hidden 7168 \
      --topk 8 --experts-per-rank $((256 / world)) --tokens 1,128,512,4096 --gpu-per-node $((world / 2)) \
      --internode-kernel $kernel --dtype bf16 --baselines --graph --iters 20 --warmup 3 \
      --json "$logs/internode-$kernel.json" > "$logs/internode-$kernel.txt" 2>&1
    echo "internode bench $kernel: exit $?"
    grep -vE 'NCCL INFO' "$logs/internode-$kernel.txt" | tail -12
    grep -E 'NET/Socket|via NET' "$logs/internode-$kernel.txt" | head -4
  done
fi
