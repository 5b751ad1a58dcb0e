// Each toolchain for real: compile, identity, the binary it returns, and the
// compiler's log in the error when the source is bad.
#include <gtest/gtest.h>

#include <string>

#include "epjit/error.h"
#include "epjit/targets/TargetInfo.h"
#include "epjit/toolchain.h"

namespace epjit {
namespace {

bool isElf(const std::vector<uint8_t>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7F && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

CompileRequest request(const char* target, const char* name, std::string source) {
  return {std::move(source), name, find_target(target), 1};
}

constexpr const char* kBadSource = "extern \"C\" void broken( { this is not C++ }\n";

TEST(HostCxxToolchain, BuildsASharedObjectAndReportsErrorsWithTheLog) {
  auto toolchain = make_host_cxx_toolchain();
  EXPECT_EQ(toolchain->name(), "host-c++");
  EXPECT_NE(toolchain->identity().find("c++"), std::string::npos) << toolchain->identity();
  EXPECT_TRUE(toolchain->supports(*find_target("host-gfx950")));
  EXPECT_FALSE(toolchain->supports(*find_target("gfx950")));
  const CompiledBinary binary = toolchain->compile(
      request("host", "k.cpp", "#include \"epjit/targets/host/prelude.h\"\nextern \"C\" int k() { return 7; }\n"));
  EXPECT_TRUE(isElf(binary.bytes));
  try {
    toolchain->compile(request("host", "broken.cpp", kBadSource));
    FAIL() << "a bad source compiled";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("broken.cpp"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("error"), std::string::npos) << error.what();
  }
}

TEST(ClangToolchain, BuildsAmdCodeObjectsForEveryAmdTarget) {
  auto toolchain = make_clang_toolchain();
  EXPECT_NE(toolchain->identity().find("clang version 22"), std::string::npos) << toolchain->identity();
  // Each target's prelude as emitted code includes it: behind its defines.
  for (const char* target : {"gfx942", "gfx950", "gfx1250", "gfx1200"}) {
    const TargetInfo& info = *find_target(target);
    std::string source;
    for (const PreludeDefine& define : info.prelude_defines())
      source += "#define " + std::string(define.name) + " " + define.value + "\n";
    source += "#include \"" + std::string(info.prelude) + "\"\nextern \"C\" __global__ void k(int* p) { *p = 1; }\n";
    const CompiledBinary binary = toolchain->compile(request(target, "k.hip", source));
    EXPECT_TRUE(isElf(binary.bytes)) << target;
  }
  EXPECT_THROW(toolchain->compile(request("gfx950", "broken.hip", kBadSource)), Error);
}

TEST(NvrtcToolchain, BuildsSm90CubinsFromEmbeddedHeadersWithoutAGpu) {
  auto toolchain = make_nvrtc_toolchain();
  EXPECT_EQ(toolchain->identity().rfind("nvrtc 1", 0), 0u) << toolchain->identity();
  const CompiledBinary binary = toolchain->compile(request(
      "sm90", "k.cu",
      "#include \"epjit/targets/sm90/prelude.h\"\n"
      "extern \"C\" __global__ void k(int8_t* q, const uint16_t* x) { epjit::prim::ptx_cvt_satfinite::"
      "quantize_fp8_chunk<epjit::Fp8Format::E4M3FN, true>(x, q, 8); }\n"));
  EXPECT_TRUE(isElf(binary.bytes));
  try {
    toolchain->compile(request("sm90", "broken.cu", kBadSource));
    FAIL() << "a bad source compiled";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("broken.cu"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("NVRTC_ERROR_COMPILATION"), std::string::npos) << error.what();
  }
}

// Debian's libamdhip64-5 bundles a hipRTC (ROCm 5.2) that runs without a GPU
// but knows only older targets such as gfx90a: the adapter is tested on it.
TEST(HiprtcToolchain, CompilesRetrievesCodeAndReportsErrorsOnDebiansHipRtc) {
  auto toolchain = make_hiprtc_toolchain();
  EXPECT_EQ(toolchain->identity().rfind("hiprtc ", 0), 0u) << toolchain->identity();
  static constexpr TargetInfo kGfx90a = [] {
    TargetInfo info = {};
    info.name = "gfx90a";
    info.arch = "gfx90a";
    info.vendor = Vendor::Amd;
    return info;
  }();
  ASSERT_TRUE(hiprtc_knows(kGfx90a)) << "this hipRTC's comgr does not list gfx90a";
  EXPECT_FALSE(hiprtc_knows(*find_target("gfx950")));
  const CompiledBinary binary =
      toolchain->compile({"extern \"C\" __global__ void k(int* p) { *p = 42; }\n", "k.hip", &kGfx90a, 2});
  EXPECT_TRUE(isElf(binary.bytes) || (binary.bytes.size() > 16 && std::string(binary.bytes.begin(), binary.bytes.begin() + 8) ==
                                                                        std::string("__CLANG_", 8)))
      << binary.bytes.size() << " bytes";
  try {
    toolchain->compile({kBadSource, "broken.hip", &kGfx90a, 2});
    FAIL() << "a bad source compiled";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("broken.hip"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("error"), std::string::npos) << error.what();
  }
}

TEST(DefaultToolchain, PicksByTarget) {
  EXPECT_EQ(default_toolchain(*find_target("host"))->name(), "host-c++");
  EXPECT_EQ(default_toolchain(*find_target("sm90"))->name(), "nvrtc");
  // This hipRTC does not know gfx950: clang compiles it.
  EXPECT_EQ(default_toolchain(*find_target("gfx950"))->name(), "clang");
}

}  // namespace
}  // namespace epjit
