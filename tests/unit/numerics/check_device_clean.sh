#!/usr/bin/env bash
# Compiles device_clean.cu as device code and fails if the result calls
# anything it does not define (a libm call, a host function).
#   check_device_clean.sh cuda NVCC SOURCE INCLUDE_DIR WORK_DIR
#   check_device_clean.sh hip CLANG LLVM_NM SOURCE INCLUDE_DIR WORK_DIR ARCH...
set -euo pipefail
kind=$1; shift
case $kind in
  cuda)
    nvcc=$1 source=$2 include=$3 work=$4
    mkdir -p "$work"
    # Without -rdc, nvcc/ptxas reject any call to a device function it lacks.
    "$nvcc" -std=c++17 -arch=sm_90 --cubin -O3 -I "$include" -o "$work/numerics_sm90.cubin" "$source"
    echo "sm_90: compiled, $(stat -c %s "$work/numerics_sm90.cubin") bytes, no unresolved calls"
    ;;
  hip)
    clang=$1 nm=$2 source=$3 include=$4 work=$5; shift 5
    mkdir -p "$work"
    for arch in "$@"; do
      object=$work/numerics_$arch.o
      "$clang" -x hip -std=c++17 --offload-arch="$arch" -nogpuinc -nogpulib --cuda-device-only \
        --no-gpu-bundle-output -O3 -c -I "$include" -o "$object" "$source"
      undefined=$("$nm" --undefined-only "$object")
      if [[ -n $undefined ]]; then
        echo "$arch: device code calls what it does not define:" >&2
        echo "$undefined" >&2
        exit 1
      fi
      echo "$arch: compiled, no undefined symbols"
    done
    ;;
  *) echo "unknown kind $kind (cuda or hip)" >&2; exit 2 ;;
esac
