# help: the low-latency combine against the staged one at 1 to 128 tokens (ncu at EP1, legs eager and graphs)
# At EP1: each kernel's time under ncu, two passes; then the legs as a user
# times them, eager and from graphs, three passes alternated.
# Reads: PROTOCOL_WORLD (2 on a 2-GPU host: time EP2 only, where ncu cannot),
# PROTOCOL_FLAGS (more epjit-bench flags, e.g. --combine-mode scatter).
pworld=${PROTOCOL_WORLD:-1}
pflags=($on_gpu --ranks-as processes --world $pworld --hidden 7168 --topk 8
        --experts-per-rank $((256 / pworld)) --tokens 1,8,32,128 --dtype bf16 ${PROTOCOL_FLAGS:-})
if (( pworld == 1 )); then
  for pass in 1 2; do
    for protocol in off on; do
      timeout 200 ncu --cache-control none --clock-control none -k regex:ep_ --metrics gpu__time_duration.sum \
        ./epjit-bench "${pflags[@]}" --low-latency-combine $protocol --iters 20 --warmup 3 2>&1 \
        | grep -E "^  ep_|gpu__time|error" > "$logs/ncu-$protocol-$pass.txt"
      echo "ncu $protocol pass $pass: $(grep -c gpu__time "$logs/ncu-$protocol-$pass.txt") kernels timed"
    done
  done
fi
for pass in 1 2 3; do
  for protocol in off on; do
    timeout 150 ./epjit-bench "${pflags[@]}" --low-latency-combine $protocol --iters 500 --warmup 20 --graph \
      --json "$logs/host-$protocol-$pass.json" > "$logs/host-$protocol-$pass.txt" 2>&1
    echo "$protocol pass $pass: exit $?"
    grep -E '^ +[0-9]+ ' "$logs/host-$protocol-$pass.txt" | head -8
  done
done
