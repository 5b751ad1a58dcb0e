# help: MORI's v1 API on epjit: test_mori_v1.py (world 1, and 2 ranks sharing a GPU) and examples/mori_v1_style.py (vLLM's calls) at 1 and 2 ranks
this_python_module
(cd ../tests/python && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
   EPJIT_GPU_TEST_RANKS_PER_GPU=2 PYTHONPATH=/tmp/epjit-py/python timeout 500 python3 -m pytest -v \
   -p no:cacheprovider -rs test_mori_v1.py test_mori.py 2>&1 | tee "$logs/pytest-mori-v1.log" | tail -30)
for ranks in 1 2; do
  (cd ../examples && EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-mori-cache \
     PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m torch.distributed.run --nproc-per-node "$ranks" \
     mori_v1_style.py 2>&1 | tail -12 | tee "$logs/mori-v1-style-$ranks.log")
done
