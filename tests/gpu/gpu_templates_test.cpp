// The templates on real GPUs, once per vendor API (Cuda/..., Hip/...) on the
// target of the GPU found: kernels come from the kernel cache (warmed
// elsewhere and imported, or compiled here by NVRTC or hipRTC), run on the
// device, and must match numerics.h bit for bit (fp8 in the target's e4m3,
// MX FP4 through the target's conversions: sm90's software codec, sm100's
// and gfx950/gfx1250's instructions); a captured graph replays with fresh
// inputs. Skipped, with the reason, where an API has no GPU (or the GPU has
// no FP4, for the FP4 cases).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "../common/block_vote_check.h"
#include "../common/deepep_cast_check.h"
#include "../common/weighted_sum_check.h"
#include "../common/template_check.h"
#include "epjit/cache.h"
#include "epjit/device.h"
#include "epjit/error.h"
#include "epjit/targets/TargetInfo.h"
#include "gpu_devices.h"

namespace epjit {
namespace {

using testing::GpuApi;
using testing::TemplateKind;

constexpr uint32_t kBlocks = 132;  // one per H200 SM
constexpr uint32_t kWarpsPerBlock = 4;  // the templates' geometry

struct Gpu {
  std::unique_ptr<Device> device;
  const TargetInfo* target = nullptr;
  std::string why_not;
};

// The API's first GPU, in this process (these tests fork nothing).
Gpu& gpu(GpuApi api) {
  auto open = [](GpuApi of) {
    Gpu g;
    try {
      g.device = testing::makeGpu(of, 0);
      g.target = find_target(g.device->default_target());
    } catch (const Error& error) {
      g.device.reset();
      g.why_not = std::string("no ") + testing::apiName(of) + " device: " + error.what();
    }
    return g;
  };
  if (api == GpuApi::Cuda) {
    static Gpu cuda = open(GpuApi::Cuda);
    return cuda;
  }
  static Gpu hip = open(GpuApi::Hip);
  return hip;
}

// The suites without cases of their own run once per API, named by it.
class OnEveryGpuApi : public ::testing::TestWithParam<GpuApi> {};
std::string apiParamName(const ::testing::TestParamInfo<GpuApi>& info) { return testing::apiName(info.param); }
#define EPJIT_INSTANTIATE_PER_GPU_API(suite)                                                \
  INSTANTIATE_TEST_SUITE_P(Cuda, suite, ::testing::Values(GpuApi::Cuda), apiParamName); \
  INSTANTIATE_TEST_SUITE_P(Hip, suite, ::testing::Values(GpuApi::Hip), apiParamName)

KernelCache& cache() {
  static KernelCache instance;
  return instance;
}

// Copies the buffers to the device, launches, copies them back.
class DeviceRun {
 public:
  DeviceRun(Device& device, const Kernel& kernel) : device_(device), kernel_(kernel), stream_(device.create_stream()) {}

  void operator()(std::vector<testing::KernelBuffer>& buffers, size_t tokens) {
    std::vector<void*> pointers;
    for (testing::KernelBuffer& buffer : buffers) {
      pointers.push_back(device_.allocate(buffer.bytes));
      device_.copy_to_device(pointers.back(), buffer.data, buffer.bytes);
    }
    KernelArgs args;
    for (void* pointer : pointers) args.add(pointer);
    args.add(tokens);
    device_.launch(kernel_, {kBlocks, kWarpsPerBlock}, args, *stream_);
    stream_->synchronize();
    for (size_t i = 0; i < buffers.size(); ++i) {
      device_.copy_to_host(buffers[i].data, pointers[i], buffers[i].bytes);
      device_.release(pointers[i]);
    }
  }

 private:
  Device& device_;
  Kernel kernel_;
  std::unique_ptr<Stream> stream_;
};

struct Case {
  const char* name;
  TemplateKind kind;
  int hidden;
  bool fp4 = false;
};

constexpr Case kCases[] = {
    {"quantize_fp8_direct", TemplateKind::QuantizeDirect, 7168},
    {"quantize_fp8_direct", TemplateKind::QuantizeDirect, 37},
    {"quantize_fp8_blockwise", TemplateKind::QuantizeBlockwise, 7168},
    {"quantize_fp8_blockwise", TemplateKind::QuantizeBlockwise, 333},
    {"dequantize_fp8_direct", TemplateKind::DequantizeDirect, 7168},
    {"dequantize_fp8_direct", TemplateKind::DequantizeDirect, 37},
    {"dequantize_fp8_blockwise", TemplateKind::DequantizeBlockwise, 7168},
    {"dequantize_fp8_blockwise", TemplateKind::DequantizeBlockwise, 333},
    // MX FP4 (one chunk-aligned width, one not).
    {"quantize_mxfp4", TemplateKind::QuantizeMx, 7168, true},
    {"quantize_mxfp4", TemplateKind::QuantizeMx, 86, true},
    {"dequantize_mxfp4", TemplateKind::DequantizeMx, 7168, true},
    {"dequantize_mxfp4", TemplateKind::DequantizeMx, 86, true},
};

using ApiAndCase = std::tuple<GpuApi, Case>;
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "_h" << c.hidden; }

class GpuTemplate : public ::testing::TestWithParam<ApiAndCase> {};

TEST_P(GpuTemplate, MatchesNumericsBitExactly) {
  const auto [api, c] = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  const TargetInfo& target = *gpu(api).target;
  if (c.fp4 && !target.has_fp4()) GTEST_SKIP() << target.name << " has no FP4 conversions (NUMERICS.md)";
  Device& device = *gpu(api).device;
  auto artifact = cache().get({c.name, {{"hidden", std::to_string(c.hidden)}}, std::string(target.name)});
  auto module = device.load_module(artifact->binary);
  DeviceRun run(device, module->kernel(c.name));
  for (int tokens : {1, 3, 37, 4096}) {
    testing::checkTemplate(c.kind, target.fp8_e4m3, c.hidden, tokens, std::ref(run));
    if (HasFatalFailure()) return;
  }
}

std::string templateCaseName(const ::testing::TestParamInfo<ApiAndCase>& info) {
  const Case& c = std::get<1>(info.param);
  return std::string(c.name) + "_h" + std::to_string(c.hidden);
}
INSTANTIATE_TEST_SUITE_P(Cuda, GpuTemplate,
                         ::testing::Combine(::testing::Values(GpuApi::Cuda), ::testing::ValuesIn(kCases)),
                         templateCaseName);
INSTANTIATE_TEST_SUITE_P(Hip, GpuTemplate,
                         ::testing::Combine(::testing::Values(GpuApi::Hip), ::testing::ValuesIn(kCases)),
                         templateCaseName);

// A test kernel compiled for `target` where the compiler is
// (scripts/gpu/prepare.sh puts NAME.TARGET.cubin or NAME.TARGET.co beside
// this binary); its file name, and its bytes (empty when it is not there).
struct BesideThisTest {
  std::string file;
  std::vector<uint8_t> binary;
};
BesideThisTest binaryBesideThisTest(const char* name, const TargetInfo& target) {
  BesideThisTest found;
  found.file = std::string(name) + "." + std::string(target.name) + std::string(target.binary_extension());
  std::ifstream file(std::filesystem::read_symlink("/proc/self/exe").parent_path() / found.file, std::ios::binary);
  found.binary = {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return found;
}

// ep.block_any (sm90: __syncthreads_or): the test kernel of
// tests/unit/templates/inputs/block_vote.mlir, compiled where the compiler
// is (scripts/gpu/prepare.sh puts block_vote.<target>.cubin beside this test).
class GpuBlockVote : public OnEveryGpuApi {};

TEST_P(GpuBlockVote, EveryWarpOfABlockGetsTheBlocksAnswer) {
  const GpuApi api = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  const auto [file, binary] = binaryBesideThisTest("block_vote", *gpu(api).target);
  ASSERT_FALSE(binary.empty()) << file << " is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu(api).device;
  auto module = device.load_module(binary);
  auto stream = device.create_stream();
  testing::checkBlockVote(device, kBlocks, [&](void* flags, void* out) {
    KernelArgs args;
    args.add(flags).add(out);
    device.launch(module->kernel("block_vote"), {kBlocks, testing::kBlockVoteWarps}, args, *stream);
    stream->synchronize();
  });
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuBlockVote);

// ep.warp.sum_rows with weighted sources (sm90: fma.rn.f32): the test
// kernel of tests/unit/templates/inputs/weighted_sum.mlir (prepare.sh puts
// weighted_sum.<target>.cubin beside this test); the host test checks the same bits.
class GpuWeightedSum : public OnEveryGpuApi {};

TEST_P(GpuWeightedSum, FusedMultiplyAddsInSourceOrderFromPlusZero) {
  const GpuApi api = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  const auto [file, binary] = binaryBesideThisTest("weighted_sum", *gpu(api).target);
  ASSERT_FALSE(binary.empty()) << file << " is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu(api).device;
  auto module = device.load_module(binary);
  auto stream = device.create_stream();
  testing::checkWeightedSum(device, [&](void* rows, void* weights, void* valid, void* out, size_t count) {
    KernelArgs args;
    args.add(rows).add(weights).add(valid).add(out).add(count);
    device.launch(module->kernel("weighted_sum"), {1, testing::kWeightedSumWarps}, args, *stream);
    stream->synchronize();
  });
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuWeightedSum);

// DeepEP's per-128 cast (sm90: cvt.rn.satfinite.e4m3x2): the kernels of
// tests/unit/templates/inputs/deepep_cast.mlir (prepare.sh compiles
// deepep_cast.<target>.cubin beside this test); the host test checks the same bits.
class GpuDeepEpCast : public OnEveryGpuApi {};

TEST_P(GpuDeepEpCast, CodesAndScalesAreDeepEpsInItsLayouts) {
  const GpuApi api = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  const auto [file, binary] = binaryBesideThisTest("deepep_cast", *gpu(api).target);
  ASSERT_FALSE(binary.empty()) << file << " is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu(api).device;
  auto module = device.load_module(binary);
  auto stream = device.create_stream();
  testing::checkDeepEpCast(device, [&](const std::string& kernel, void* input, void* codes, void* scales,
                                       size_t tokens, size_t hidden) {
    KernelArgs args;
    args.add(input).add(codes).add(scales).add(tokens).add(hidden);
    device.launch(module->kernel(kernel), {2, testing::kDeepEpCastWarps}, args, *stream);
    stream->synchronize();
  });
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuDeepEpCast);

// The occupancy query the EP op fits its grids with: at least one block,
// more with smaller blocks, and with 1024-thread blocks (at most two per SM
// or CU) no more than with the templates' geometry.
class GpuOccupancy : public OnEveryGpuApi {};

TEST_P(GpuOccupancy, ResidentBlocksCountWholeMultiprocessors) {
  const GpuApi api = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  Device& device = *gpu(api).device;
  auto artifact = cache().get({"quantize_fp8_direct", {{"hidden", "7168"}}, device.default_target()});
  auto module = device.load_module(artifact->binary);
  const Kernel kernel = module->kernel("quantize_fp8_direct");
  const uint32_t full = device.resident_blocks(kernel, kWarpsPerBlock);
  const uint32_t single = device.resident_blocks(kernel, 1);
  const uint32_t largest = device.resident_blocks(kernel, uint32_t(1024 / device.wave_size()));
  EXPECT_GE(largest, 1u);
  EXPECT_GE(full, largest);
  EXPECT_GE(single, full);
  std::fprintf(stderr, "%s: resident blocks of 1 / %u / %d warps: %u / %u / %u\n", device.default_target().c_str(),
               kWarpsPerBlock, 1024 / device.wave_size(), single, full, largest);
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuOccupancy);

// quantize_fp8_direct captured once, replayed 50 times with fresh inputs
// copied into the captured buffers before each replay.
class GpuGraph : public OnEveryGpuApi {};

TEST_P(GpuGraph, CapturedQuantizeReplaysWithFreshInputs) {
  const GpuApi api = GetParam();
  if (!gpu(api).device) GTEST_SKIP() << gpu(api).why_not;
  Device& device = *gpu(api).device;
  const Fp8Format e4m3 = gpu(api).target->fp8_e4m3;
  const int hidden = 7168, tokens = 256;
  const size_t n = size_t(tokens) * hidden;
  auto artifact = cache().get({"quantize_fp8_direct", {{"hidden", std::to_string(hidden)}}, device.default_target()});
  auto module = device.load_module(artifact->binary);
  const Kernel kernel = module->kernel("quantize_fp8_direct");
  void* input = device.allocate(n * 2);
  void* output = device.allocate(n);
  KernelArgs args;
  args.add(input).add(output).add(size_t(tokens));
  auto stream = device.create_stream();
  device.begin_capture(*stream);
  device.launch(kernel, {kBlocks, kWarpsPerBlock}, args, *stream);
  std::unique_ptr<Graph> graph = device.end_capture(*stream);
  std::vector<uint8_t> codes(n);
  for (int replay = 0; replay < 50; ++replay) {
    const std::vector<uint16_t> rows = testing::randomRows(tokens, hidden, uint32_t(1000 + replay));
    device.copy_to_device(input, rows.data(), n * 2);
    graph->launch(*stream);
    stream->synchronize();
    device.copy_to_host(codes.data(), output, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(codes[i], encode_fp8(decode_bf16(rows[i]), e4m3, Overflow::Saturate))
          << "replay " << replay << " element " << i;
  }
  device.release(input);
  device.release(output);
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuGraph);

}  // namespace
}  // namespace epjit
