# help: the eager legs of small calls as a user times them, an older bundle and tools against these, alternated
# Needs prepare.sh's BEFORE=<an older .gpu>. Three passes at 1 / 8 / 128 /
# 8192 tokens, 500 iterations each (host-side changes show here, not under
# ncu); logs host-cCASE-SIDE-PASS.
# Reads: AB_FLAGS (as the ab check), AB_WORLD (2 on a 2-GPU host: EP2, where
# ncu cannot time kernels that wait for their peer's).
import_before
IFS=';' read -r -a cases <<< "${AB_FLAGS:-}"
(( ${#cases[@]} == 0 )) && cases=("")
ab_world=${AB_WORLD:-1}
for n in "${!cases[@]}"; do
  for pass in 1 2 3; do
    for side in before after; do
      EPJIT_CACHE_DIR=$(side_cache $side) timeout 100 $(side_bench $side) $on_gpu \
        --ranks-as processes --world $ab_world --hidden 7168 --topk 8 --experts-per-rank $((256 / ab_world)) \
        --tokens 1,8,128,8192 --dtype bf16 --iters 500 --warmup 20 ${cases[$n]} \
        --json "$logs/host-c$n-$side-$pass.json" > "$logs/host-c$n-$side-$pass.txt" 2>&1
      echo "case $n (${cases[$n]}), $side, pass $pass: exit $?"
      grep -E '^ +[0-9]+ ' "$logs/host-c$n-$side-$pass.txt" | head -4
    done
  done
done
