// The templates on a real NVIDIA GPU (sm90): kernels come from the kernel
// cache (warmed elsewhere and imported, or compiled here by NVRTC), run on
// the CUDA device, and must match numerics.h bit for bit; a captured graph
// replays with fresh inputs. Skipped, with the reason, where no GPU is present.
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

namespace epjit {
namespace {

using testing::TemplateKind;

constexpr uint32_t kBlocks = 132;  // one per H200 SM
constexpr uint32_t kWarpsPerBlock = 4;  // the templates' geometry

struct Gpu {
  std::unique_ptr<Device> device;
  std::string why_not;
};

Gpu& gpu() {
  static Gpu instance = [] {
    Gpu g;
    try {
      g.device = make_cuda_device(0);
    } catch (const Error& error) {
      g.why_not = error.what();
    }
    return g;
  }();
  return instance;
}

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
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "_h" << c.hidden; }

class GpuTemplate : public ::testing::TestWithParam<Case> {};

TEST_P(GpuTemplate, MatchesNumericsBitExactly) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  const Case c = GetParam();
  Device& device = *gpu().device;
  auto artifact = cache().get({c.name, {{"hidden", std::to_string(c.hidden)}}, device.default_target()});
  auto module = device.load_module(artifact->binary);
  DeviceRun run(device, module->kernel(c.name));
  for (int tokens : {1, 3, 37, 4096}) {
    testing::checkTemplate(c.kind, Fp8Format::E4M3FN, c.hidden, tokens, std::ref(run));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90, GpuTemplate, ::testing::ValuesIn(kCases), [](const auto& info) {
  return std::string(info.param.name) + "_h" + std::to_string(info.param.hidden);
});

// A test kernel compiled where the compiler is (scripts/gpu/prepare.sh puts
// it beside this binary); empty when it is not there.
std::vector<uint8_t> cubinBesideThisTest(const char* name) {
  std::ifstream file(std::filesystem::read_symlink("/proc/self/exe").parent_path() / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// ep.block_any on sm90 (__syncthreads_or): the test kernel of
// tests/unit/templates/inputs/block_vote.mlir, compiled where the compiler
// is (scripts/gpu/prepare.sh puts block_vote.cubin beside this test).
TEST(GpuBlockVote, EveryWarpOfABlockGetsTheBlocksAnswer) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  const std::vector<uint8_t> binary = cubinBesideThisTest("block_vote.cubin");
  ASSERT_FALSE(binary.empty()) << "block_vote.cubin is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu().device;
  auto module = device.load_module(binary);
  auto stream = device.create_stream();
  testing::checkBlockVote(device, kBlocks, [&](void* flags, void* out) {
    KernelArgs args;
    args.add(flags).add(out);
    device.launch(module->kernel("block_vote"), {kBlocks, testing::kBlockVoteWarps}, args, *stream);
    stream->synchronize();
  });
}

// ep.warp.sum_rows with weighted sources on sm90 (fma.rn.f32): the test
// kernel of tests/unit/templates/inputs/weighted_sum.mlir (prepare.sh puts
// weighted_sum.cubin beside this test); the host test checks the same bits.
TEST(GpuWeightedSum, FusedMultiplyAddsInSourceOrderFromPlusZero) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  const std::vector<uint8_t> binary = cubinBesideThisTest("weighted_sum.cubin");
  ASSERT_FALSE(binary.empty()) << "weighted_sum.cubin is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu().device;
  auto module = device.load_module(binary);
  auto stream = device.create_stream();
  testing::checkWeightedSum(device, [&](void* rows, void* weights, void* valid, void* out, size_t count) {
    KernelArgs args;
    args.add(rows).add(weights).add(valid).add(out).add(count);
    device.launch(module->kernel("weighted_sum"), {1, testing::kWeightedSumWarps}, args, *stream);
    stream->synchronize();
  });
}

// DeepEP's per-128 cast on sm90 (cvt.rn.satfinite.e4m3x2): the kernels of
// tests/unit/templates/inputs/deepep_cast.mlir (prepare.sh compiles
// deepep_cast.cubin beside this test); the host test checks the same bits.
TEST(GpuDeepEpCast, CodesAndScalesAreDeepEpsInItsLayouts) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  const std::vector<uint8_t> binary = cubinBesideThisTest("deepep_cast.cubin");
  ASSERT_FALSE(binary.empty()) << "deepep_cast.cubin is missing: scripts/gpu/prepare.sh compiles it beside this test";
  Device& device = *gpu().device;
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

// The occupancy query the EP op fits its grids with: whole SMs' worth of
// blocks, at least one block per SM at the templates' geometry, more with
// smaller blocks.
TEST(GpuOccupancy, ResidentBlocksCountWholeMultiprocessors) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  Device& device = *gpu().device;
  auto artifact = cache().get({"quantize_fp8_direct", {{"hidden", "7168"}}, device.default_target()});
  auto module = device.load_module(artifact->binary);
  const Kernel kernel = module->kernel("quantize_fp8_direct");
  const uint32_t full = device.resident_blocks(kernel, kWarpsPerBlock);
  const uint32_t single = device.resident_blocks(kernel, 1);
  EXPECT_GE(full, kBlocks) << "an H200 has 132 SMs";
  EXPECT_EQ(full % kBlocks, 0u) << full << " is not a whole number of blocks per SM";
  EXPECT_GE(single, full);
}

// quantize_fp8_direct captured once, replayed 50 times with fresh inputs
// copied into the captured buffers before each replay.
TEST(GpuGraph, CapturedQuantizeReplaysWithFreshInputs) {
  if (!gpu().device) GTEST_SKIP() << "no CUDA device: " << gpu().why_not;
  Device& device = *gpu().device;
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
      ASSERT_EQ(codes[i], encode_fp8(decode_bf16(rows[i]), Fp8Format::E4M3FN, Overflow::Saturate))
          << "replay " << replay << " element " << i;
  }
  device.release(input);
  device.release(output);
}

}  // namespace
}  // namespace epjit
