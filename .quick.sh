# help: ad hoc: test_deep_ep.py on CUDA ranks, then the layer's cost at 1 and 128 tokens, then 4096
this_python_module
(cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   EPJIT_GPU_TEST_RANKS_PER_GPU=3 PYTHONPATH=/tmp/epjit-py/python timeout 240 python3 -m pytest -q \
   -p no:cacheprovider -rs test_deep_ep.py -k "cuda" 2>&1 | tail -8)
(cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 200 python3 deep_ep_overhead.py --tokens 1,128 --iters 200 --stages --profile 2>&1)
(cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 100 python3 deep_ep_overhead.py --tokens 4096 --iters 50 2>&1)
