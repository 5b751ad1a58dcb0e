# help: gather, std-MoE and scatter (with and without quant) at EP1 on the first GPU
n=0
for flags in "" "--std-moe" "--std-moe --combine-mode scatter" "--combine-mode scatter" \
  "--combine-mode scatter --quant fp8_direct_cast" "--std-moe --combine-mode scatter --quant fp8_direct_cast" \
  "--std-moe --combine-mode scatter --quant fp8_blockwise"; do
  n=$((n + 1))
  CUDA_VISIBLE_DEVICES=0 timeout 100 ./epjit-bench $on_gpu --ranks-as processes \
    $(cat bench-shape-1.txt) --dtype bf16 $flags --graph --iters 20 --warmup 3 --json "$logs/ep1-$n.json" \
    > "$logs/ep1-$n.txt" 2>&1
  echo "EP1 ${flags:-gather}: exit $?"
  grep -E '^ +[0-9]+ ' "$logs/ep1-$n.txt"
done
