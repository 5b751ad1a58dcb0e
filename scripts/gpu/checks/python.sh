# help: the Python module built here for this host's Python, then test_gpu.py, test_torch_ops.py, test_moe_layer.py and test_mori.py (torch)
# epjit.mori's kernels compile here from the DSL with the provider beside
# the driver (a wheel carries it alike).
this_python_module
(cd ../tests/python && PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m pytest -q -p no:cacheprovider \
   test_gpu.py 2>&1 | tail -15 | tee "$logs/pytest-gpu.log")
(cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m pytest -q -p no:cacheprovider test_torch_ops.py \
   test_moe_layer.py 2>&1 | tail -15 | tee "$logs/pytest-torch.log")
(cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m pytest -v -p no:cacheprovider -rs test_mori.py 2>&1 \
   | tail -15 | tee "$logs/pytest-mori.log")
