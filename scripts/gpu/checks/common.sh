# What every check starts from (sourced by ./run, in .gpu, with $logs set):
# the GPU named in the logs, the bundle imported into a fresh cache that the
# tools use with no compiler provider, and this host's world (EP4 where four
# GPUs are found, EP2 where two, else EP1) with the bench's shape for it.
cache=/tmp/epjit-gpu-cache
rm -rf "$cache"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
./epjit-warm --import sm90.bundle --cache-dir "$cache" --json > "$logs/import.json" || exit 1
./epjit-cache --cache-dir "$cache" verify > "$logs/verify.txt" || exit 1
export EPJIT_CACHE_DIR=$cache EPJIT_KERNEL_SOURCE_LIBRARY=/nonexistent
world=$(nvidia-smi -L | wc -l)
(( world > 4 )) && world=4
(( world == 3 )) && world=2
shape=$(cat bench-shape-$world.txt)
provider=$PWD/libepjit_kernel_source.so

# The before side of an A/B (prepare.sh's BEFORE=): its bench and its cache.
side_bench() { if [[ $1 == before ]]; then echo ./epjit-bench-before; else echo ./epjit-bench; fi; }
side_cache() { if [[ $1 == before ]]; then echo /tmp/cache-before; else echo "$cache"; fi; }
import_before() {
  [[ -f sm90-before.bundle ]] || { echo "no before side: prepare with BEFORE=<an older .gpu>" >&2; exit 2; }
  ./epjit-warm-before --import sm90-before.bundle --cache-dir /tmp/cache-before --json > /dev/null || exit 1
}

# The Python module for this host's Python, from the sources in $1, built in
# $2 (logs py-$3-*.log), reporting revision $4.
python_module() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPJIT_BUILD_COMPILER=OFF -DEPJIT_BUILD_TESTS=OFF \
    -DEPJIT_REVISION="$4" -DEPJIT_HEADER_DEPS_DIR="$PWD/deps" -DPython_EXECUTABLE="$(command -v python3)" \
    -DEPJIT_TEST_PYTHON="$(command -v python3)" > "$logs/py-$3-configure.log" 2>&1 &&
    ninja -C "$2" _epjit > "$logs/py-$3-build.log" 2>&1
}
# This tree's module in /tmp/epjit-py (built once per machine).
this_python_module() {
  if [[ ! -f /tmp/epjit-py/build.ninja ]] || ! ls /tmp/epjit-py/python/epjit/_epjit*.so > /dev/null 2>&1; then
    python_module .. /tmp/epjit-py this "$(cat revision)"
    echo "python module build exit $?"
    tail -3 "$logs/py-this-build.log"
  fi
}
