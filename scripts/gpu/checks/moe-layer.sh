# help: examples/moe_layer.py: both layers checked and timed at this host's world (EP1 on one GPU), then 2 ranks sharing GPU 0 (checks only)
# Kernels compile here from the DSL (the provider beside the driver).
# Reads: MOE_TOKENS (tokens per rank, default 1,128,4096), MOE_ARGS (more
# moe_layer.py arguments).
this_python_module
run_layer() {
  (cd ../examples && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-moe-cache \
     PYTHONPATH=/tmp/epjit-py/python timeout 500 python3 -m torch.distributed.run "$@" ${MOE_ARGS:-})
}
run_layer --nproc-per-node "$world" moe_layer.py --torch --tokens "${MOE_TOKENS:-1,128,4096}" \
  --json "$logs/moe-layer.json" > "$logs/moe-layer.log" 2>&1
echo "moe layer, world $world: exit $?"
grep -E '^\{|FAILED|Error' "$logs/moe-layer.log" | tail -20
# NCCL takes one rank per GPU: two ranks on one GPU exchange through gloo.
CUDA_VISIBLE_DEVICES=0 run_layer --nproc-per-node 2 moe_layer.py --torch --dist-backend gloo --tokens 1,77 --iters 3 \
  > "$logs/moe-layer-shared.log" 2>&1
echo "moe layer, 2 ranks sharing GPU 0: exit $?"
grep -E '^\{|FAILED|Error' "$logs/moe-layer-shared.log" | tail -8
