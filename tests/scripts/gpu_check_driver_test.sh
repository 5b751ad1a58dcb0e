#!/usr/bin/env bash
# The GPU check's driver, as a user meets it before any GPU: every check file
# is listed by `run --help` with its help line, answers `run CHECK --help`,
# and parses; an unknown check is refused with status 2 and the list.
#   gpu_check_driver_test.sh SOURCE_DIR
set -uo pipefail
src=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/scripts/gpu/run" "$dir/" && cp -r "$src/scripts/gpu/checks" "$dir/checks"
fail() { echo "FAIL: $*" >&2; exit 1; }
listing=$("$dir/run" --help) || fail "run --help exited $?"
count=0
for file in "$dir"/checks/*.sh; do
  name=$(basename "$file" .sh)
  bash -n "$file" || fail "$name.sh does not parse"
  [[ $name == common ]] && continue
  count=$((count + 1))
  line=$(sed -n 's/^# help: //p' "$file")
  [[ -n $line ]] || fail "$name.sh has no '# help:' line"
  grep -qFx "$(printf '  %-12s %s' "$name" "$line")" <<<"$listing" || fail "run --help does not list $name with its help line"
  help=$("$dir/run" "$name" --help) || fail "run $name --help exited $?"
  [[ $(head -1 <<<"$help") == "$line" ]] || fail "run $name --help does not start with its help line"
done
(( count >= 10 )) || fail "only $count checks found"
[[ $(grep -c '^  [a-z]' <<<"$listing") == "$count" ]] || fail "run --help lists other than the $count checks"
"$dir/run" no-such-check > /dev/null 2> "$dir/err"
status=$?
[[ $status == 2 ]] || fail "an unknown check exited $status, not 2"
grep -q "no check named 'no-such-check'" "$dir/err" || fail "an unknown check is not named in the error"
grep -q "what to carry: .gpu.tgz" <<<"$listing" || fail "run --help does not say what to carry"
# A host without GPUs (no nvidia-smi or rocminfo that lists one): a check is
# refused with status 2 and the way to run it anyway, before anything runs.
if ! { command -v nvidia-smi && nvidia-smi -L; } > /dev/null 2>&1 && ! { command -v rocminfo && rocminfo; } > /dev/null 2>&1; then
  printf 'sm90\n' > "$dir/targets.txt"
  "$dir/run" suite "$dir/logs" > /dev/null 2> "$dir/err"
  status=$?
  [[ $status == 2 ]] || fail "a check without a GPU exited $status, not 2"
  grep -q "no GPU found: .*GPU_DRY_RUN=1" "$dir/err" || fail "a check without a GPU does not say why: $(cat "$dir/err")"
fi
bash -n "$src/scripts/gpu/prepare.sh" || fail "prepare.sh does not parse"
echo "gpu check driver: $count checks listed, each with its help"
