# help: dispatch's row copies against Hopper's bulk copy engine, locally and over NVLink (built here with nvcc)
nvcc -O3 -arch=sm_90 -o bulk_copy_probe bulk_copy_probe.cu || exit 1
for pass in 1 2; do ./bulk_copy_probe | tee "$logs/bulk-$pass.txt"; done
