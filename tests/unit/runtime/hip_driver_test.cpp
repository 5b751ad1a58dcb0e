// The HIP driver's symbol table, on Debian's libamdhip64 (no GPU here). In its
// own binary: that library brings an older LLVM, kept apart from processes
// that load epjit's compiler.
#include <gtest/gtest.h>

#include "../../../runtime/device/gpu_drivers.h"
#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit {
namespace {

// Debian's libamdhip64 is installed: the whole HIP symbol table resolves;
// without a GPU, initialization fails with a HIP error, not a crash.
TEST(HipDevice, SymbolTableLoadsAndInitializationFailsCleanlyWithoutAGpu) {
  const drivers::HipDriver& hip = drivers::hip_driver();
  EXPECT_NE(hip.hipModuleLaunchKernel, nullptr);
  EXPECT_NE(hip.hipIpcOpenMemHandle, nullptr);
  EXPECT_NE(hip.hipStreamBeginCapture, nullptr);
  EXPECT_FALSE(hip.library.path().empty());
  try {
    make_hip_device(0);
    GTEST_SKIP() << "an AMD GPU is present here";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("HIP"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace epjit
