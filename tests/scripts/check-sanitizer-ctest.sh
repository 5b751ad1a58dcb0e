#!/usr/bin/env bash
# scripts/sanitizer-ctest.sh on a made-up CTest project: a test that died only
# of the sanitizer runtime's shadow-mapping failure runs once more and the run
# passes; a race report, a second mapping failure or any other failure fails it.
# usage: check-sanitizer-ctest.sh SOURCE_DIR CMAKE WORK_DIR
set -uo pipefail
source_dir=$1
cmake=$2
work=$3
rm -rf "$work" && mkdir -p "$work/project"
mapping='==7==ERROR: ThreadSanitizer failed to allocate 0x1ec100000b000 (541028440387584) bytes at address 11adb985e000 (errno: 12)'
cat > "$work/project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(sanitizer_ctest_check NONE)
enable_testing()
add_test(NAME e2e.passes COMMAND sh -c "echo fine")
# Dies of the mapping failure on its first run only.
add_test(NAME e2e.once COMMAND sh -c "if [ -f once.ran ]; then echo fine; else touch once.ran; echo '$mapping'; exit 66; fi")
add_test(NAME e2e.always COMMAND sh -c "echo '$mapping'; exit 66")
add_test(NAME e2e.race COMMAND sh -c "echo 'WARNING: ThreadSanitizer: data race (pid=7)'; echo '$mapping'; exit 66")
add_test(NAME e2e.plain COMMAND sh -c "echo 'expected 3, got 4'; exit 1")
CMAKE
"$cmake" -S "$work/project" -B "$work/build" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }

failures=0
# expect NAME REGEX STATUS(pass|fail) WANT_RERUN(yes|no)
expect() {
  rm -f "$work/build/once.ran"
  "$source_dir/scripts/sanitizer-ctest.sh" "$work/build" 2 "$2" > "$work/$1.log" 2>&1
  local status=$?
  local reran=no
  grep -q "running them once more" "$work/$1.log" && reran=yes
  if { [[ $3 == pass ]] && (( status != 0 )); } || { [[ $3 == fail ]] && (( status == 0 )); } || [[ $reran != "$4" ]]; then
    echo "FAILED $1: exit $status, re-ran: $reran (expected $3, re-run $4)"; cat "$work/$1.log"
    failures=$((failures + 1))
  else
    echo "ok $1: exit $status, re-ran: $reran"
  fi
}
expect clean '^e2e\.passes$' pass no
expect mapping_once '^e2e\.(passes|once)$' pass yes
expect mapping_twice '^e2e\.always$' fail yes
expect race '^e2e\.(once|race)$' fail no
expect plain '^e2e\.(once|plain)$' fail no
exit $((failures > 0))
