# help: the EP2 configuration matrix (bench-matrix.txt: scatter, quant, std-MoE, hidden 4096 top-6)
# One epjit-bench per line of bench-matrix.txt at world 2, 1 to 8192
# tokens, eager and graphs, with NCCL's columns (--baselines).
n=0
while read -r flags; do
  n=$((n + 1))
  timeout 100 ./epjit-bench $on_gpu --ranks-as processes --world 2 \
    --tokens 1,8,32,128,512,1024,2048,4096,8192 $flags \
    --graph --baselines --iters 20 --warmup 3 --json "$logs/matrix-$n.json" > "$logs/matrix-$n.txt" 2>&1
  echo "matrix $n ($flags): exit $?"
done < bench-matrix.txt
