#include "gpu_drivers.h"

#include <mutex>

namespace epjit::drivers {

#define EPJIT_BIND_SYMBOL(name, result, ...) driver.library.bind(driver.name, #name);

const CudaDriver& cuda_driver() {
  static std::once_flag once;
  static CudaDriver driver;
  std::call_once(once, [] {
    driver.library = DynamicLibrary::open_first(
        {"libcuda.so.1", "libcuda.so"}, "the CUDA driver (libcuda.so.1)",
        "install the NVIDIA driver on a machine with an NVIDIA GPU, or use the host device");
    EPJIT_CUDA_SYMBOLS(EPJIT_BIND_SYMBOL)
  });
  return driver;
}

const HipDriver& hip_driver() {
  static std::once_flag once;
  static HipDriver driver;
  std::call_once(once, [] {
    driver.library = DynamicLibrary::open_first(
        {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"},
        "the HIP runtime (libamdhip64.so)",
        "install ROCm's HIP runtime (libamdhip64.so: ROCm's hip-runtime-amd package, or Debian's libamdhip64-5) on a "
        "machine with an AMD GPU and put it on the loader path (LD_LIBRARY_PATH=/opt/rocm/lib), or use the host "
        "device");
    EPJIT_HIP_SYMBOLS(EPJIT_BIND_SYMBOL)
    if (void* r0600 = driver.library.find("hipGetDevicePropertiesR0600")) {
      driver.hipGetDeviceProperties = reinterpret_cast<hipError_t (*)(void*, int)>(r0600);
      driver.properties_r0600 = true;
    } else {
      driver.library.bind(driver.hipGetDeviceProperties, "hipGetDeviceProperties");
    }
  });
  return driver;
}

}  // namespace epjit::drivers
