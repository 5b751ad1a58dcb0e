# help: examples/moe_layer.py against all_to_all_single over NCCL, on 2 GPUs
this_python_module
(cd ../examples && PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m torch.distributed.run --nproc-per-node 2 \
   moe_layer.py --torch --tokens 128,4096 --json "$logs/moe-layer.json" 2>&1 | tail -20 | tee "$logs/moe-layer.log")
