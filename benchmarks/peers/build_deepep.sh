#!/usr/bin/env bash
# Builds DeepEP on a GPU host from the archive deepep_source.sh made, with the
# host's CUDA toolkit, torch, and the NCCL and NVSHMEM that torch's wheels
# bring (DeepEP's setup.py finds them), in place: PYTHONPATH=BUILD_DIR/DeepEP
# then imports the real deep_ep. Prints the build time, and the import or the
# end of the build log.
#   build_deepep.sh ARCHIVE.tgz BUILD_DIR LOG
# Reads: MAX_JOBS (default: the cores), TORCH_CUDA_ARCH_LIST (default 9.0, Hopper).
set -uo pipefail
archive=$1 dir=$2 log=$3
rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$archive" -C "$dir" || exit 2
cd "$dir/DeepEP" || exit 2
start=$(date +%s)
MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
  python3 setup.py build_ext --inplace > "$log" 2>&1
status=$?
echo "DeepEP $(head -1 COMMIT | cut -c1-12) build: exit $status after $(($(date +%s) - start)) s ($(nproc) cores)"
if ((status != 0)); then
  grep -m5 -E "error|Error|No such file|Cannot find" "$log"
  tail -5 "$log"
  exit "$status"
fi
PYTHONPATH=$PWD python3 -c "import deep_ep; print('imports:', deep_ep.__file__, deep_ep.__version__, deep_ep.Buffer)"
