# help: what a meeting and its steps cost on this GPU, apart from any EP kernel (built here with nvcc)
nvcc -O3 -arch=sm_90 -o meeting_latency meeting_latency.cu || exit 1
for pass in 1 2; do ./meeting_latency | tee "$logs/meeting-$pass.txt"; done
