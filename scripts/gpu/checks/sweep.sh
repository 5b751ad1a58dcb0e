# help: the geometry sweep at EP2 (bench-sweep.txt: blocks x warps for both kernels)
n=0
while read -r flags; do
  n=$((n + 1))
  timeout 60 ./epjit-bench $on_gpu --ranks-as processes --world 2 --hidden 7168 --topk 8 \
    --experts-per-rank 128 --dtype bf16 --tokens 1,128,4096,8192 $flags --iters 20 --warmup 3 \
    > "$logs/sweep-$n.txt" 2>&1
  echo "sweep $n ($flags): exit $?"
  grep -E '^ +[0-9]+ ' "$logs/sweep-$n.txt"
done < bench-sweep.txt
