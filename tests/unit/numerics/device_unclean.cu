// The negative control of check_device_clean.sh: a kernel calling a device
// function nobody defines (as a libm call would be with -nogpulib) must be
// rejected, so the numerics.device.* tests can fail.
#if defined(__NVCC__)
extern "C" __device__ float undefined_device_function(float);
extern "C" __global__ void calls_undefined(float* x) { x[0] = undefined_device_function(x[0]); }
#else
extern "C" __attribute__((device)) float undefined_device_function(float);
extern "C" __attribute__((global)) void calls_undefined(float* x) { x[0] = undefined_device_function(x[0]); }
#endif
