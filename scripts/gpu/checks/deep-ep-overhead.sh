# help: only the DeepEP layer's cost per round trip against the native op (benchmarks/deep_ep_overhead.py; DEEPEP_OVERHEAD_ARGS: its arguments, e.g. "--tokens 4096 --modes normal"), without deep-ep's tests
this_python_module
(cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-deep-ep-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 500 python3 deep_ep_overhead.py ${DEEPEP_OVERHEAD_ARGS:-} 2>&1 |
   tee "$logs/deep-ep-overhead-only.txt")
