# help: examples/mori_style.py, a MORI program, unchanged after epjit.mori.install(), one rank per GPU
this_python_module
(cd ../examples && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m torch.distributed.run --nproc-per-node "$world" \
   mori_style.py 2>&1 | tail -20 | tee "$logs/mori-style.log")
