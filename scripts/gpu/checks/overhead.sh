# help: what a round trip costs from Python at this host's world (benchmarks/mori_overhead.py, rank 0's times)
# Reads: OVERHEAD_ARGS (its arguments, e.g. "--tokens 1,2048"),
# OVERHEAD_RANKS_PER_GPU (2: two rank processes per GPU, a check of the
# script rather than a number).
this_python_module
per_gpu=${OVERHEAD_RANKS_PER_GPU:-1}
(cd ../benchmarks && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
   PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 mori_overhead.py --world $((world * per_gpu)) \
   --ranks-per-gpu "$per_gpu" ${OVERHEAD_ARGS:-} 2>&1 | tee "$logs/mori-overhead.txt")
