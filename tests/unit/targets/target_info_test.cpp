// TargetInfo answers every target question: which target a device is (from
// CUDA's compute capability or HIP's gcnArchName), which flags each compiler
// builds with, what each target converts, and the host rows carry their GPU's
// numerics.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "epjit/targets/TargetInfo.h"

namespace epjit {
namespace {

bool contains(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

TEST(TargetLookup, CudaComputeCapabilities90And100AndNothingElse) {
  const TargetInfo* hopper = target_for_cuda_capability(9, 0);
  ASSERT_NE(hopper, nullptr);
  EXPECT_EQ(hopper->name, "sm90");
  EXPECT_EQ(hopper->wave_size, 32);
  const TargetInfo* blackwell = target_for_cuda_capability(10, 0);
  ASSERT_NE(blackwell, nullptr);
  EXPECT_EQ(blackwell->name, "sm100");
  EXPECT_EQ(blackwell->arch, "sm_100a") << "the FP4 conversions are sm_100a instructions";
  EXPECT_EQ(blackwell->wave_size, 32);
  // sm_100a code runs on 10.0 alone: B300 (10.3) and RTX Blackwell (12.0) are other targets.
  for (auto [major, minor] : {std::pair{8, 0}, {8, 9}, {9, 1}, {10, 3}, {12, 0}, {0, 0}})
    EXPECT_EQ(target_for_cuda_capability(major, minor), nullptr) << major << "." << minor;
  EXPECT_EQ(device_targets_of(Vendor::Nvidia), "sm90 (compute capability 9.0), sm100 (compute capability 10.0)");
}

TEST(TargetLookup, GcnArchNamesWithAndWithoutFeatureSuffixes) {
  const std::pair<const char*, const char*> cases[] = {
      {"gfx942", "gfx942"},
      {"gfx942:sramecc+:xnack-", "gfx942"},
      {"gfx942:xnack+", "gfx942"},
      {"gfx950", "gfx950"},
      {"gfx950:sramecc+:xnack-", "gfx950"},
      {"gfx1250", "gfx1250"},
      {"gfx1250:xnack-", "gfx1250"},
      {"gfx1200", "gfx1200"},
  };
  for (const auto& [reported, expected] : cases) {
    const TargetInfo* target = target_for_amd_arch(reported);
    ASSERT_NE(target, nullptr) << reported;
    EXPECT_EQ(target->name, expected) << reported;
    EXPECT_TRUE(target->is_amd());
  }
  // Unknown architectures, prefixes of known ones, host rows and empty names match nothing.
  for (const char* unknown : {"gfx90a:sramecc+:xnack-", "gfx1100", "gfx94", "gfx9420", "host-gfx942", "", ":xnack-"})
    EXPECT_EQ(target_for_amd_arch(unknown), nullptr) << unknown;
  const std::string amd = device_targets_of(Vendor::Amd);
  EXPECT_NE(amd.find("gfx942"), std::string::npos) << amd;
  EXPECT_NE(amd.find("gfx1250"), std::string::npos) << amd;
  EXPECT_EQ(amd.find("host"), std::string::npos) << amd;
}

TEST(TargetFacts, WaveSizesFp8FormatsAndFp4) {
  EXPECT_EQ(find_target("gfx942")->wave_size, 64);
  EXPECT_EQ(find_target("gfx950")->wave_size, 64);
  EXPECT_EQ(find_target("gfx1250")->wave_size, 32);
  EXPECT_EQ(find_target("gfx1200")->wave_size, 32);
  EXPECT_TRUE(find_target("gfx1200")->converts_fp8_in_hardware(Fp8Format::E4M3FN));
  EXPECT_FALSE(find_target("gfx1200")->has_fp4());
  EXPECT_EQ(find_target("gfx942")->fp8_e4m3, Fp8Format::E4M3FNUZ);
  EXPECT_TRUE(find_target("gfx942")->converts_fp8_in_hardware(Fp8Format::E4M3FNUZ));
  EXPECT_FALSE(find_target("gfx942")->converts_fp8_in_hardware(Fp8Format::E4M3FN));
  EXPECT_FALSE(find_target("host")->converts_fp8_in_hardware(Fp8Format::E4M3FN));
  EXPECT_FALSE(find_target("gfx942")->has_fp4());
  EXPECT_TRUE(find_target("gfx950")->converts_fp4_in_hardware());
  EXPECT_TRUE(find_target("gfx1250")->converts_fp4_in_hardware());
  EXPECT_FALSE(find_target("sm90")->converts_fp4_in_hardware());
  EXPECT_EQ(find_target("sm90")->fp4, Fp4Support::Software) << "sm90 converts FP4 with the numerics.h codec";
  EXPECT_EQ(find_target("sm100")->fp4, Fp4Support::PtxPair);
  EXPECT_TRUE(find_target("sm100")->converts_fp8_in_hardware(Fp8Format::E4M3FN));
  EXPECT_TRUE(find_target("sm100")->dependent_launch);
  EXPECT_EQ(target_names_where([](const TargetInfo& t) { return t.converts_fp4_in_hardware(); }),
            "gfx950, gfx1250, sm100");
  EXPECT_EQ(target_names_where([](const TargetInfo& t) { return t.has_fp4() && !t.is_host(); }),
            "gfx950, gfx1250, sm90, sm100");
}

TEST(TargetFacts, HostRowsCarryTheirGpusNumerics) {
  for (const TargetInfo& target : all_targets()) {
    if (!target.is_host() || target.name == "host") continue;
    const TargetInfo* gpu = find_target(target.numerics_of);
    ASSERT_NE(gpu, nullptr) << target.name;
    EXPECT_EQ(target.name, "host-" + std::string(gpu->name));
    EXPECT_EQ(target.wave_size, gpu->wave_size) << target.name;
    EXPECT_EQ(target.fp8_e4m3, gpu->fp8_e4m3) << target.name;
    EXPECT_EQ(target.fp8_e5m2, gpu->fp8_e5m2) << target.name;
    EXPECT_EQ(target.has_fp4(), gpu->has_fp4()) << target.name;
    EXPECT_FALSE(target.converts_fp4_in_hardware()) << target.name;
    EXPECT_EQ(target.arch, "native");
    EXPECT_FALSE(target.is_simt());
  }
}

TEST(TargetFacts, NamesAreUniqueAndEveryTargetHasASchedule) {
  std::set<std::string_view> names;
  for (const TargetInfo& target : all_targets()) {
    EXPECT_TRUE(names.insert(target.name).second) << target.name;
    ASSERT_FALSE(target.schedule.empty()) << target.name;
    EXPECT_EQ(target.schedule.back().max_tokens, 0) << target.name << ": the last row takes every larger call";
    for (size_t i = 0; i + 1 < target.schedule.size(); ++i) {
      EXPECT_GT(target.schedule[i].max_tokens, 0) << target.name;
      EXPECT_LT(target.schedule[i].max_tokens, target.schedule[i + 1].max_tokens == 0
                                                    ? INT64_MAX
                                                    : target.schedule[i + 1].max_tokens);
    }
  }
  EXPECT_EQ(find_target("nonexistent"), nullptr);
}

TEST(CompileFlags, OneSourceForTheOfflineToolsAndTheRuntime) {
  const auto clang = compile_flags(*find_target("gfx950"), Compiler::Clang, 3);
  EXPECT_TRUE(contains(clang, "--offload-arch=gfx950"));
  EXPECT_TRUE(contains(clang, "-nogpulib"));
  EXPECT_TRUE(contains(clang, "-O3"));
  EXPECT_TRUE(contains(compile_flags(*find_target("gfx1250"), Compiler::HipRtc, 2), "--gpu-architecture=gfx1250"));
  const auto nvrtc = compile_flags(*find_target("sm90"), Compiler::Nvrtc, 3);
  const auto nvcc = compile_flags(*find_target("sm90"), Compiler::Nvcc, 3);
  EXPECT_TRUE(contains(nvrtc, "--gpu-architecture=sm_90"));
  EXPECT_TRUE(contains(nvcc, "--gpu-architecture=sm_90"));
  EXPECT_TRUE(contains(nvrtc, "-Xptxas=-O3"));
  EXPECT_TRUE(contains(nvcc, "-Xptxas=-O3"));
  EXPECT_TRUE(contains(compile_flags(*find_target("sm100"), Compiler::Nvrtc, 3), "--gpu-architecture=sm_100a"));
  const auto host = compile_flags(*find_target("host"), Compiler::HostCxx, 1);
  EXPECT_TRUE(contains(host, "-O1"));
  EXPECT_TRUE(contains(host, "-shared"));
  EXPECT_TRUE(contains(compile_flags(*find_target("host"), Compiler::HostCxx, 9), "-O3")) << "levels clamp to 0-3";
}

TEST(TargetFacts, FilesAndKernelsPerVendor) {
  EXPECT_EQ(find_target("gfx942")->source_extension(), ".hip");
  EXPECT_EQ(find_target("sm90")->binary_extension(), ".cubin");
  EXPECT_EQ(find_target("host-gfx950")->binary_extension(), ".so");
  EXPECT_TRUE(find_target("host")->kernel_specifiers(128).empty());
  EXPECT_EQ(find_target("sm90")->kernel_specifiers(512).back(), "__launch_bounds__(512, 1)");
  EXPECT_EQ(find_target("gfx942")->kernel_specifiers(512).back(), "__launch_bounds__(512)");
  EXPECT_EQ(vendor_name(Vendor::Nvidia), "nvidia");
}

}  // namespace
}  // namespace epjit
