#!/usr/bin/env bash
# Prepares .gpu/, what travels to a GPU machine (which has no LLVM/MLIR): the
# stripped GPU test and epjit-warm, and a bundle of the sm90 kernels the GPU
# tests use, warmed here (NVRTC runs without a GPU). On the GPU machine:
#   cd .gpu && ./run.sh OUTDIR
set -euo pipefail
build=${1:-build}
out=.gpu
rm -rf "$out" && mkdir -p "$out"
cat > "$out/manifest.json" <<'JSON'
{"targets": ["sm90"],
 "kernels": [
  {"template": "quantize_fp8_direct", "params": {"hidden": 7168}},
  {"template": "quantize_fp8_direct", "params": {"hidden": 37}},
  {"template": "quantize_fp8_blockwise", "params": {"hidden": 7168}},
  {"template": "quantize_fp8_blockwise", "params": {"hidden": 333}},
  {"template": "dequantize_fp8_direct", "params": {"hidden": 7168}},
  {"template": "dequantize_fp8_direct", "params": {"hidden": 37}},
  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 7168}},
  {"template": "dequantize_fp8_blockwise", "params": {"hidden": 333}}]}
JSON
"$build/bin/epjit-warm" "$out/manifest.json" --cache-dir "$out/warm" --export "$out/sm90.bundle" --json
rm -rf "$out/warm"
for tool in gpu_templates_test epjit-warm epjit-cache; do
  cp "$build/bin/$tool" "$out/" && strip "$out/$tool"
done
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine: import the warmed kernels, then run the GPU tests with
# no compiler reachable (every kernel must come from the bundle).
set -uo pipefail
logs=${1:-.}
cache=/tmp/epjit-gpu-cache
rm -rf "$cache"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
./epjit-warm --import sm90.bundle --cache-dir "$cache" --json | tee "$logs/import.json"
./epjit-cache --cache-dir "$cache" verify | tee "$logs/verify.txt"
EPJIT_CACHE_DIR=$cache EPJIT_KERNEL_SOURCE_LIBRARY=/nonexistent ./gpu_templates_test 2>&1 | tee "$logs/gpu_templates_test.log"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
