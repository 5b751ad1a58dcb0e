# help: the multi-rank protocol with rank processes sharing each GPU (worlds 2-4, replays, timeouts, internode)
# gpu_ep_test's world 2 to 4 cases, graph replays, the peer timeouts and the
# internode cases of two GPUs per node over the host transport, up to 4 rank
# processes per GPU (EPJIT_GPU_TEST_RANKS_PER_GPU), then the 10,000-call
# stress at world 2. The GPU time-slices the ranks' contexts: a check of one
# GPU's memory model, nothing about NVLink or speed.
# Reads: SHARED_FILTER (gtest filter), SHARED_TIMEOUT (s, default 300),
# SHARED_MPS=1 (run the ranks side by side under MPS, each held to
# SHARED_MPS_PERCENT of the SMs, default 25, and add epjit-bench
# --ranks-per-gpu 2 at EP2; worlds 3 and 4 then time out at meetings).
if [[ ${SHARED_MPS:-0} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/epjit-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/epjit-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || exit 1
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${SHARED_MPS_PERCENT:-25}
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
fi
EPJIT_GPU_TEST_RANKS_PER_GPU=4 timeout ${SHARED_TIMEOUT:-300} ./gpu_ep_test \
  --gtest_filter="${SHARED_FILTER:-${gpu_api}/GpuEp.*_w2:${gpu_api}/GpuEp.*_w3:${gpu_api}/GpuEp.*_w4:${gpu_api}/*GraphReplay*:${gpu_api}/GpuEpTimeout.*:${gpu_api}/*Internode*host_w4_g2*}" \
  > "$logs/gpu_ep_shared.log" 2>&1
echo "gpu_ep_test shared (4 ranks per GPU) exit $?"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |FAILED \]' "$logs/gpu_ep_shared.log" | tail -40
EPJIT_GPU_TEST_RANKS_PER_GPU=2 timeout 300 ./gpu_ep_test --gtest_filter="${gpu_api}/*Stress*" > "$logs/gpu_ep_shared_stress.log" 2>&1
echo "gpu_ep_test shared stress (2 ranks per GPU) exit $?"
grep -E 'OK \]|FAILED \]' "$logs/gpu_ep_shared_stress.log"
if [[ ${SHARED_MPS:-0} == 1 ]]; then
  for protocol in off on; do
    timeout 100 ./epjit-bench $on_gpu --ranks-as processes --ranks-per-gpu 2 --world 2 \
      --hidden 7168 --topk 8 --experts-per-rank 128 --tokens 1,8,32,128 --dtype bf16 --low-latency-combine $protocol \
      --iters 200 --warmup 20 --graph --json "$logs/shared-bench-$protocol.json" > "$logs/shared-bench-$protocol.txt" 2>&1
    echo "EP2 on one GPU under MPS, low-latency combine $protocol: exit $?"
    grep -E '^ +[0-9]+ ' "$logs/shared-bench-$protocol.txt"
  done
fi
