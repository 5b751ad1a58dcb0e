#!/usr/bin/env bash
# DeepEP's sources at a pinned commit as one archive, for a GPU host without
# network (build_deepep.sh builds it there): DeepEP from its public
# repository, and the fmt headers its third-party/fmt submodule pins where
# the commit has one (DeepEP 2.x).
#   benchmarks/peers/deepep_source.sh DEEPEP_GIT_DIR FMT_GIT_DIR OUT.tgz [COMMIT]
# (git clones or mirrors of github.com/deepseek-ai/DeepEP and fmtlib/fmt that
# hold the commits).
set -euo pipefail
# DeepEP 1.x's last commit (2026-02-03), the legacy Buffer API alone (the API
# epjit.deep_ep serves): it needs NVSHMEM, which torch's nvidia-nvshmem wheel
# brings, and no NCCL device API. DeepEP 2.1.0 (dd758ca, 2026-07-14) does not
# build against the NCCL 2.28.9 torch 2.11 ships (ncclCommQueryProperties and
# NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER are undefined there; 1 x H100, 59 s).
deepep_commit=${4:-567632dd59810d77b3cc05553df953cc0f779799}
deepep=$1 fmt=$2 out=$3
deepep_commit=$(git -C "$deepep" rev-parse "$deepep_commit^{commit}")
fmt_commit=$(git -C "$deepep" ls-tree "$deepep_commit" third-party/fmt | awk '$2 == "commit" {print $3}')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$deepep" archive --prefix=DeepEP/ "$deepep_commit" | tar x -C "$work"
echo "$deepep_commit" > "$work/DeepEP/COMMIT"
if [[ -n $fmt_commit ]]; then
  git -C "$fmt" archive --prefix=DeepEP/third-party/fmt/ "$fmt_commit" include | tar x -C "$work"
  echo "fmt $fmt_commit" >> "$work/DeepEP/COMMIT"
fi
tar czf "$out" -C "$work" DeepEP
echo "$out: DeepEP ${deepep_commit:0:12}${fmt_commit:+ with fmt ${fmt_commit:0:12}} ($(du -h "$out" | cut -f1))"
