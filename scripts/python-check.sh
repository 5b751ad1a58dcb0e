#!/usr/bin/env bash
# `pip install .` into a fresh venv, then the pytest suite against the
# installed package (make test runs it). The wheel is built without the
# compiler half to keep CI short (EPJIT_PIP_FULL=1 builds it in, as a plain
# `pip install .` does where LLVM/MLIR 22 are installed); kernel source then
# comes from the regular build's libepjit_kernel_source.so.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/$build/pip-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check pytest ml_dtypes numpy
args=()
if [[ ${EPJIT_PIP_FULL:-0} != 1 ]]; then
  args+=(-C cmake.define.EPJIT_BUILD_COMPILER=OFF)
  export EPJIT_KERNEL_SOURCE_LIBRARY=$root/$build/lib/libepjit_kernel_source.so
fi
start=$(date +%s)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${args[@]}" "$root"
echo "python-check: pip install . took $(( $(date +%s) - start )) s"
cd "$venv"  # import the installed package, not the source tree
EPJIT_CACHE_DIR=$root/$build/tests/python/pip-cache "$venv/bin/python" -m pytest -q "$root/tests/python"
