#!/usr/bin/env bash
# Per template and target: registers, scratch, code size (from epjit-compile
# --emit asm) and the wall time of `epjit-compile --emit bin`. Prints a
# Markdown table; docs/PERFORMANCE.md records its output.
#   scripts/template-report.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
compile=$build/bin/epjit-compile
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A hidden=([quantize_fp8_direct]=7168 [dequantize_fp8_direct]=7168 [quantize_fp8_blockwise]=7168
                   [dequantize_fp8_blockwise]=7168 [quantize_mxfp4]=7168 [dequantize_mxfp4]=7168)
templates=(quantize_fp8_direct dequantize_fp8_direct quantize_fp8_blockwise dequantize_fp8_blockwise
           quantize_mxfp4 dequantize_mxfp4)
# Every GPU target TargetInfo knows, and the plain host target, with their vendors.
declare -A vendor
targets=()
while IFS= read -r line; do
  name=${line%%:*}
  kind=$(sed -n 's/.*vendor \([a-z]*\),.*/\1/p' <<<"$line")
  [[ $kind == cpu && $name != host ]] && continue
  targets+=("$name")
  vendor[$name]=$kind
done < <("$compile" --list-targets)

echo "| template | target | registers (VGPR/SGPR or regs) | scratch / spill | code bytes | --emit bin seconds |"
echo "|---|---|---|---|---|---|"
for t in "${templates[@]}"; do
  for target in "${targets[@]}"; do
    args=(--template "$t" --set "hidden=${hidden[$t]}" --target "$target")
    if ! "$compile" "${args[@]}" --emit hip -o /dev/null 2>/dev/null; then
      echo "| $t | $target | not supported (ep-check-target) | | | |"
      continue
    fi
    start=$(date +%s%N)
    "$compile" "${args[@]}" --emit bin -o "$work/kernel.bin"
    seconds=$(awk -v ns="$(( $(date +%s%N) - start ))" 'BEGIN { printf "%.2f", ns / 1e9 }')
    resources=$("$compile" "${args[@]}" --emit asm | grep '^; resources' || true)
    field() { sed -n "s/.* $1 \(-\?[0-9]*\).*/\1/p" <<<"$resources"; }
    case ${vendor[$target]} in
      amd) regs="$(field vgpr) / $(field sgpr)"; scratch=$(field scratch); code=$(field code) ;;
      nvidia) regs="$(field registers)"; scratch=$(field spill); code=$(field code) ;;
      cpu) regs="-"; scratch="-"; code=$(stat -c %s "$work/kernel.bin")" (.so)" ;;
    esac
    printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "$target" "$regs" "$scratch" "$code" "$seconds"
  done
done
