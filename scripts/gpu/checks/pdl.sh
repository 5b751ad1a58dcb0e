# help: programmatic dependent launch off and on (A/B/A/B) on the bench's shape at this host's world
for pass in 1 2; do
  for pdl in 0 1; do
    EPJIT_DEPENDENT_LAUNCH=$pdl timeout 100 ./epjit-bench $on_gpu --ranks-as processes $shape \
      --dtype bf16 --graph --iters 50 --warmup 5 --json "$logs/pdl$pdl-$pass.json" > "$logs/pdl$pdl-$pass.txt" 2>&1
    echo "dependent launch $pdl, pass $pass: exit $?"
    grep -E '^ +[0-9]+ ' "$logs/pdl$pdl-$pass.txt"
  done
done
