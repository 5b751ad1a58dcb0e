# help: the Python call path of an older tree against this one (mori_overhead.py), then the Python GPU tests shared
# Needs prepare.sh's BEFORE_TREE=<commit>. Both modules are built here;
# three passes alternated; then test_gpu.py at world 1 and, with two rank
# processes per GPU, test_gpu.py and test_mori.py on this tree's module.
# Kernels compile here from the DSL with this tree's provider: a before tree
# with the provider identity check refuses it, one without it gets this
# tree's kernels, so A/B only host-side changes of trees whose templates agree.
# Reads: PY_AB_ARGS (mori_overhead.py's arguments, e.g. "--tokens 1,8192"),
# PY_AB_PROFILE=1 (where a one-token round trip's time goes, this tree's module).
[[ -f before-src.tgz ]] || { echo "no before tree: prepare with BEFORE_TREE=<commit>" >&2; exit 2; }
rm -rf /tmp/before-src && mkdir -p /tmp/before-src && tar xzf before-src.tgz -C /tmp/before-src || exit 1
this_python_module &
python_module /tmp/before-src /tmp/epjit-py-before before "$(cat before-revision)" &
wait
ls /tmp/epjit-py/python/epjit/_epjit*.so /tmp/epjit-py-before/python/epjit/_epjit*.so || exit 1
for pass in 1 2 3; do
  for side in before after; do
    dir=/tmp/epjit-py
    [[ $side == before ]] && dir=/tmp/epjit-py-before
    EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-py-ab-cache-$side \
      PYTHONPATH=$dir/python timeout 200 python3 ../benchmarks/mori_overhead.py ${PY_AB_ARGS:-} \
      > "$logs/py-overhead-$side-$pass.txt" 2>&1
    echo "$side, pass $pass: exit $?"
    cat "$logs/py-overhead-$side-$pass.txt"
  done
done
if [[ ${PY_AB_PROFILE:-0} == 1 ]]; then
  EPJIT_KERNEL_SOURCE_LIBRARY="$provider" EPJIT_CACHE_DIR=/tmp/epjit-py-ab-cache-after \
    PYTHONPATH=/tmp/epjit-py/python timeout 200 python3 ../benchmarks/mori_overhead.py --tokens 1 --iters 2000 \
    --profile 2>&1 | grep -vE '^ *$|Ordered by|List reduced'
fi
(cd ../tests/python && PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m pytest -q -p no:cacheprovider \
   test_gpu.py 2>&1 | tail -3 | tee "$logs/pytest-gpu.log")
(cd ../tests/python && EPJIT_GPU_TEST_RANKS_PER_GPU=2 PYTHONPATH=/tmp/epjit-py/python timeout 300 python3 -m pytest \
   -v -p no:cacheprovider -rs test_gpu.py 2>&1 | tail -12 | tee "$logs/pytest-gpu-shared.log")
(cd ../tests/python && EPJIT_GPU_TEST_RANKS_PER_GPU=2 EPJIT_KERNEL_SOURCE_LIBRARY="$provider" \
   EPJIT_CACHE_DIR=/tmp/epjit-mori-cache PYTHONPATH=/tmp/epjit-py/python timeout 400 python3 -m pytest -v \
   -p no:cacheprovider -rs test_mori.py 2>&1 | tail -16 | tee "$logs/pytest-mori-shared.log")
