#!/usr/bin/env bash
# DeepEP's sources at a pinned commit as one archive, for a GPU host without
# network (build_deepep.sh builds it there): DeepEP from its public
# repository, and the fmt headers its third-party/fmt submodule pins.
#   benchmarks/peers/deepep_source.sh DEEPEP_GIT_DIR FMT_GIT_DIR OUT.tgz
# (git clones or mirrors of github.com/deepseek-ai/DeepEP and fmtlib/fmt that
# hold the commits below).
set -euo pipefail
# DeepEP 2.1.0, 2026-07-14 ("NCCL Device API compat: use runtime version for ncclDevCommCreate").
deepep_commit=dd758caf451848bd150e1046af3d0a73e5fff38d
deepep=$1 fmt=$2 out=$3
fmt_commit=$(git -C "$deepep" ls-tree "$deepep_commit" third-party/fmt | awk '{print $3}')
[[ -n $fmt_commit ]] || { echo "DeepEP $deepep_commit has no third-party/fmt submodule entry" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$deepep" archive --prefix=DeepEP/ "$deepep_commit" | tar x -C "$work"
git -C "$fmt" archive --prefix=DeepEP/third-party/fmt/ "$fmt_commit" include | tar x -C "$work"
echo "$deepep_commit" > "$work/DeepEP/COMMIT"
echo "fmt $fmt_commit" >> "$work/DeepEP/COMMIT"
tar czf "$out" -C "$work" DeepEP
echo "$out: DeepEP ${deepep_commit:0:12} with fmt ${fmt_commit:0:12} ($(du -h "$out" | cut -f1))"
