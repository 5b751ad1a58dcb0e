// The HIP driver's symbol table, on Debian's libamdhip64 (no GPU here). In its
// own binary: that library brings an older LLVM, kept apart from processes
// that load epjit's compiler.
#include <gtest/gtest.h>

#include <cstddef>

#include "../../../runtime/device/gpu_drivers.h"
#include "../../../runtime/device/hip_properties.h"
#include "epjit/device.h"
#include "epjit/error.h"

#if __has_include(<hip/hip_runtime_api.h>)
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#define EPJIT_HAVE_HIP_HEADER 1
#endif

namespace epjit {
namespace {

// Debian's libamdhip64 is installed: the whole HIP symbol table resolves;
// without a GPU, initialization fails with a HIP error, not a crash.
TEST(HipDevice, SymbolTableLoadsAndInitializationFailsCleanlyWithoutAGpu) {
  const drivers::HipDriver& hip = drivers::hip_driver();
  EXPECT_NE(hip.hipModuleLaunchKernel, nullptr);
  EXPECT_NE(hip.hipIpcOpenMemHandle, nullptr);
  EXPECT_NE(hip.hipStreamBeginCapture, nullptr);
  EXPECT_NE(hip.hipStreamIsCapturing, nullptr) << "the host internode transport refuses a capture by asking";
  EXPECT_NE(hip.hipThreadExchangeStreamCaptureMode, nullptr) << "make_routing() allocates while a stream captures";
  EXPECT_NE(hip.hipGetDeviceProperties, nullptr) << "the device's architecture comes from its properties";
  EXPECT_FALSE(hip.library.path().empty());
  try {
    make_hip_device(0);
    GTEST_SKIP() << "an AMD GPU is present here";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("HIP"), std::string::npos) << error.what();
  }
}

// Every way to ask for the HIP device goes to the same adapter, and without a
// GPU each says what went wrong (never a crash).
TEST(HipDevice, SelectedByNameItFailsWithAHipErrorWithoutAGpu) {
  try {
    make_device("hip", 0);
    GTEST_SKIP() << "an AMD GPU is present here";
  } catch (const Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("HIP"), std::string::npos) << what;
    EXPECT_NE(what.find("fix:"), std::string::npos) << what;
  }
}

#ifdef EPJIT_HAVE_HIP_HEADER
// The R0000 properties layout epjit reads through matches the HIP header
// installed here (HIP 5: hipGetDeviceProperties).
TEST(HipDevice, PropertiesLayoutMatchesTheInstalledHeader) {
  if (HIP_VERSION_MAJOR >= 6) GTEST_SKIP() << "the installed header has the R0600 layout";
  EXPECT_EQ(offsetof(drivers::HipDevicePropR0000, warpSize), offsetof(hipDeviceProp_t, warpSize));
  EXPECT_EQ(offsetof(drivers::HipDevicePropR0000, gcnArchName), offsetof(hipDeviceProp_t, gcnArchName));
  EXPECT_EQ(sizeof(drivers::HipDevicePropR0000::gcnArchName), sizeof(hipDeviceProp_t::gcnArchName));
}
#endif

}  // namespace
}  // namespace epjit
