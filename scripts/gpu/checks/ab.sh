# help: each kernel's own time (ncu medians) of an older bundle against this one, alternated, at EP1
# Needs prepare.sh's BEFORE=<an older .gpu>. Two passes per case at 1 / 8 /
# 128 / 8192 tokens; logs ncu-cCASE-SIDE-PASS.txt (scripts/ncu-medians.py
# reads them).
# Reads: AB_TOKENS (other counts; the last must be 8192, the bundle's
# max_tokens), AB_FLAGS (more epjit-bench flags, several sets separated by
# ';', each a case of its own).
import_before
IFS=';' read -r -a cases <<< "${AB_FLAGS:-}"
(( ${#cases[@]} == 0 )) && cases=("")
for n in "${!cases[@]}"; do
  for pass in 1 2; do
    for side in before after; do
      EPJIT_CACHE_DIR=$(side_cache $side) timeout 200 ncu --cache-control none --clock-control none -k regex:ep_ \
        --metrics gpu__time_duration.sum $(side_bench $side) $on_gpu --ranks-as processes \
        --world 1 --hidden 7168 --topk 8 --experts-per-rank 256 --tokens ${AB_TOKENS:-1,8,128,8192} --dtype bf16 \
        --iters 20 --warmup 3 ${cases[$n]} 2>&1 | grep -E "^  ep_|gpu__time|error" > "$logs/ncu-c$n-$side-$pass.txt"
      echo "case $n (${cases[$n]}), $side, pass $pass: $(grep -c gpu__time "$logs/ncu-c$n-$side-$pass.txt") kernels timed"
    done
  done
done
