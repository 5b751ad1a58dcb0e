# help: gpu_templates_test alone: every template bit-exact on this host's target (MX FP4 where it has FP4), occupancy, a graph replay
# The other vendor's instantiations are skipped with the reason.
timeout 120 ./gpu_templates_test > "$logs/gpu_templates_test.log" 2>&1
echo "gpu_templates_test exit $?"
grep -E 'OK \]|FAILED \]|PASSED|resident blocks' "$logs/gpu_templates_test.log" | grep -v '\] Hip/\|\] Cuda/.*/HIP'
