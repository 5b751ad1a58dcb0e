#!/usr/bin/env bash
# Installs this build into a fresh prefix, then builds and runs examples/cpp
# against it as a user would: find_package(epjit) from the prefix, and no
# EPJIT_ variable in the environment.
#   check-cpp-example.sh CMAKE GENERATOR BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
cmake=$1 generator=$2 build=$3 source=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
for f in lib/libepjit.so lib/libepjit_kernel_source.so lib/cmake/epjit/epjitConfig.cmake \
         lib/cmake/epjit/epjitConfigVersion.cmake include/epjit/ep/op.h include/epjit/numerics.h \
         include/epjit/targets/TargetInfo.h bin/epjit-cache bin/epjit-warm bin/epjit-bench bin/epjit-info; do
  [[ -e $prefix/$f ]] || { echo "the install lacks $f"; exit 1; }
done
# Nothing installed may point back into the build tree.
if grep -rl --binary-files=text "$build/lib" "$prefix/lib" "$prefix/bin" | grep -v '\.a$'; then
  echo "installed files above name the build tree ($build/lib)"; exit 1
fi
# The provider is self-contained: nothing beyond the C and C++ runtimes.
if ldd "$prefix/lib/libepjit_kernel_source.so" | grep -vE 'linux-vdso|ld-linux|/libc\.so|/libm\.so|/libstdc\+\+\.so|/libgcc_s\.so'; then
  echo "the installed provider needs the libraries above"; exit 1
fi
# libepjit.so exports epjit's API only, not the header-only libraries inside it.
if nm -D --defined-only "$prefix/lib/libepjit.so" | grep -E ' (T|W) _ZN(6spdlog|3fmt|8nlohmann)' | head -3 | grep .; then
  echo "libepjit.so exports the symbols above"; exit 1
fi
"$cmake" -S "$source/examples/cpp" -B "$work/build" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
"$cmake" --build "$work/build" > "$work/build.log"
for variable in $(env | grep -o '^EPJIT_[A-Z_]*' || true); do unset "$variable"; done
"$work/build/epjit_example"
