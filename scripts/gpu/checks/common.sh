# What every check starts from (sourced by ./run, in .gpu, with $logs set):
# this host's GPUs found by vendor (nvidia-smi: CUDA; rocminfo: HIP) and
# their epjit target (sm90, sm100; gfx942, gfx950, gfx1250, gfx1200), named
# in the logs; the bundle imported into a fresh cache that the tools use with
# no compiler provider; and this host's world (EP4 where four GPUs are found,
# EP2 where two, else EP1) with the bench's shape for it. Checks run the
# tools with --device $gpu_device --target $gpu_target and filter the GPU
# tests' suites by $gpu_api (Cuda/..., Hip/...). GPU_DRY_RUN=1 on a machine
# without GPUs runs a check for the bundle's first target, to see what fails.
cache=/tmp/epjit-gpu-cache
rm -rf "$cache"
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  gpu_device=cuda gpu_api=Cuda
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$logs/gpu.txt"
  case $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1) in
    9.0) gpu_target=sm90 ;;
    10.0) gpu_target=sm100 ;;
    *) gpu_target= ;;
  esac
  world=$(nvidia-smi -L | wc -l)
elif command -v rocminfo > /dev/null && rocminfo > /dev/null 2>&1; then
  gpu_device=hip gpu_api=Hip
  archs=$(rocminfo | sed -n 's/^ *Name: *\(gfx[0-9a-f]*\).*/\1/p')
  echo "AMD $(echo "$archs" | sort | uniq -c | tr -s ' ')" | tee "$logs/gpu.txt"
  gpu_target=$(echo "$archs" | head -1)
  world=$(echo "$archs" | wc -l)
elif [[ -n ${GPU_DRY_RUN:-} ]]; then
  # No GPU here: the checks run against the bundle's first target anyway, so
  # that each tool shows what is missing (the driver library it names).
  gpu_target=$(head -1 targets.txt)
  case $gpu_target in sm*) gpu_device=cuda gpu_api=Cuda ;; *) gpu_device=hip gpu_api=Hip ;; esac
  world=1
  echo "dry run without a GPU: $gpu_target ($gpu_device), the bundle's first target" | tee "$logs/gpu.txt"
else
  echo "no GPU found: nvidia-smi (CUDA) and rocminfo (ROCm) list none here (GPU_DRY_RUN=1 runs the check anyway)" >&2
  exit 2
fi
if [[ -z $gpu_target ]] || ! grep -qx "$gpu_target" targets.txt; then
  echo "this host's GPU (target '${gpu_target:-unknown}') is not among the bundle's targets: $(tr '\n' ' ' < targets.txt)" >&2
  echo "prepare for it: GPU_TARGETS=<target> scripts/gpu/prepare.sh" >&2
  exit 2
fi
./epjit-warm --import gpu.bundle --cache-dir "$cache" --json > "$logs/import.json" || exit 1
./epjit-cache --cache-dir "$cache" verify > "$logs/verify.txt" || exit 1
export EPJIT_CACHE_DIR=$cache EPJIT_KERNEL_SOURCE_LIBRARY=/nonexistent
(( world > 4 )) && world=4
(( world == 3 )) && world=2
shape=$(cat bench-shape-$world.txt)
provider=$PWD/libepjit_kernel_source.so
# The tools on this host's GPUs.
on_gpu="--device $gpu_device --target $gpu_target"

# The before side of an A/B (prepare.sh's BEFORE=): its bench and its cache.
side_bench() { if [[ $1 == before ]]; then echo ./epjit-bench-before; else echo ./epjit-bench; fi; }
side_cache() { if [[ $1 == before ]]; then echo /tmp/cache-before; else echo "$cache"; fi; }
import_before() {
  [[ -f gpu-before.bundle ]] || { echo "no before side: prepare with BEFORE=<an older .gpu>" >&2; exit 2; }
  ./epjit-warm-before --import gpu-before.bundle --cache-dir /tmp/cache-before --json > /dev/null || exit 1
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
