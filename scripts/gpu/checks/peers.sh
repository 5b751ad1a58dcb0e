# help: DeepEP beside epjit (native eager and graph, epjit.deep_ep) and NCCL, one workload checked then timed, at this host's world
# The peer comparison (benchmarks/peers/README.md): hidden 7168, top-8, 256
# experts, bf16 and fp8, uniform and skewed routing. epjit-bench --baselines
# times epjit's op eager and as graphs, NCCL's grouped send/recv of the same
# bytes and the peer-write ceilings; deep_ep_paths.py (torchrun, a process per
# GPU) times DeepEP's Buffer and epjit.deep_ep's after checking each against
# the same reference; table.py writes peers.md from both.
# DeepEP comes from deepep-src.tgz (prepare.sh's DEEPEP_SOURCE=), built here
# first unless /tmp/deepep holds a build (its time in deepep-build.txt);
# without it the DeepEP rows say why.
# Reads: PEERS_TOKENS (1,128,512,4096,8192), PEERS_LL_TOKENS (1,128),
# PEERS_ITERS (20), PEERS_DTYPES (bf16,fp8), PEERS_ROUTING (uniform,skewed).
this_python_module
if [[ -f deepep-src.tgz && ! -f /tmp/deepep/DeepEP/COMMIT ]]; then
  ./peers/build_deepep.sh deepep-src.tgz /tmp/deepep "$logs/deepep-build.log" 2>&1 | tee "$logs/deepep-build.txt"
fi
deepep_path=
[[ -f /tmp/deepep/DeepEP/COMMIT ]] && deepep_path=/tmp/deepep/DeepEP
tokens=${PEERS_TOKENS:-1,128,512,4096,8192}
IFS=, read -ra dtypes <<< "${PEERS_DTYPES:-bf16,fp8}"
IFS=, read -ra routings <<< "${PEERS_ROUTING:-uniform,skewed}"
for dtype in "${dtypes[@]}"; do
  for routing in "${routings[@]}"; do
    timeout 200 ./epjit-bench $on_gpu --ranks-as processes --world "$world" --hidden 7168 --topk 8 \
      --experts-per-rank $((256 / world)) --tokens "$tokens" --dtype "$dtype" --routing "$routing" --graph \
      $( ((world > 1)) && echo --baselines) --iters "${PEERS_ITERS:-20}" --warmup 5 \
      --json "$logs/epjit-$dtype-$routing.json" > "$logs/epjit-$dtype-$routing.txt" 2>&1
    echo "epjit-bench $dtype $routing: exit $?"
  done
done
EPJIT_CACHE_DIR=$cache PYTHONPATH=/tmp/epjit-py/python${deepep_path:+:$deepep_path} timeout 400 \
  python3 -m torch.distributed.run --nproc-per-node "$world" peers/deep_ep_paths.py --tokens "$tokens" \
  --ll-tokens "${PEERS_LL_TOKENS:-1,128}" --dtype "${PEERS_DTYPES:-bf16,fp8}" --routing "${PEERS_ROUTING:-uniform,skewed}" \
  --iters "${PEERS_ITERS:-20}" --json "$logs/deep-ep-paths.json" > "$logs/deep-ep-paths.txt" 2>&1
echo "deep_ep_paths.py: exit $?"
tail -3 "$logs/deep-ep-paths.txt"
python3 peers/table.py "$logs"/epjit-*.json "$logs/deep-ep-paths.json" | tee "$logs/peers.md"
