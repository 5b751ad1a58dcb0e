// Every quantize/dequantize template, compiled by epjit-compile for the host
// targets (each carrying a GPU's numerics and wave width), loaded and run by
// warp threads of the host device, must match numerics.h bit for bit: random inputs with fixed
// seeds, hidden sizes that are and are not multiples of the chunk and wave,
// tokens 1, 3 and 37, outputs poisoned before each run with guard elements
// after them (tests/common/template_check.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "../../common/block_vote_check.h"
#include "../../common/deepep_cast_check.h"
#include "../../common/weighted_sum_check.h"
#include "../../common/template_check.h"
#include "epjit/numerics.h"
#include "epjit/device.h"

namespace epjit {
namespace {

struct HostTarget {
  const char* name;
  Fp8Format fp8;
  bool fp4;
};

constexpr HostTarget kHostTargets[] = {
    {"host", Fp8Format::E4M3FN, true},
    {"host-gfx942", Fp8Format::E4M3FNUZ, false},
    {"host-gfx950", Fp8Format::E4M3FN, true},
    {"host-gfx1250", Fp8Format::E4M3FN, true},
    {"host-sm100", Fp8Format::E4M3FN, true},
};

using testing::TemplateKind;

struct TemplateCase {
  const char* name;
  TemplateKind kind;
  bool fp4;
  std::vector<int> hiddens;  // one chunk-aligned, one not
};

const TemplateCase kTemplates[] = {
    {"quantize_fp8_direct", TemplateKind::QuantizeDirect, false, {7168, 37}},
    {"quantize_fp8_blockwise", TemplateKind::QuantizeBlockwise, false, {1024, 333}},
    {"quantize_mxfp4", TemplateKind::QuantizeMx, true, {7168, 86}},
    {"dequantize_fp8_direct", TemplateKind::DequantizeDirect, false, {7168, 37}},
    {"dequantize_fp8_blockwise", TemplateKind::DequantizeBlockwise, false, {1024, 333}},
    {"dequantize_mxfp4", TemplateKind::DequantizeMx, true, {7168, 86}},
};

constexpr int kTokenCounts[] = {1, 3, 37};
struct Case {
  const TemplateCase* tpl;
  const HostTarget* target;
  int hidden;
};

std::string caseName(const Case& c) {
  std::string target = c.target->name;
  for (char& ch : target) ch = ch == '-' ? '_' : ch;
  return std::string(c.tpl->name) + "_" + target + "_h" + std::to_string(c.hidden);
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const TemplateCase& tpl : kTemplates)
    for (const HostTarget& target : kHostTargets)
      if (!tpl.fp4 || target.fp4)
        for (int hidden : tpl.hiddens) cases.push_back({&tpl, &target, hidden});
  return cases;
}

// Compiles one kernel library for the host with epjit-compile into its own
// directory under the test work dir; `source` names what to compile
// (`--template NAME --set ...` or `--input FILE`) and its target.
std::string compileKernel(const std::string& name, const std::string& source) {
  const std::filesystem::path dir = std::filesystem::path(EPJIT_TEST_WORK_DIR) / name;
  std::filesystem::create_directories(dir);
  const std::string library = (dir / "kernel.so").string();
  std::ostringstream command;
  command << EPJIT_COMPILE_TOOL << " " << source << " --emit bin -o " << library << " --dump-stages "
          << (dir / "stages").string() << " 2> " << (dir / "compile.log").string();
  if (std::system(command.str().c_str()) != 0) {
    std::ifstream log(dir / "compile.log");
    std::stringstream text;
    text << log.rdbuf();
    throw std::runtime_error("epjit-compile failed: " + command.str() + "\n" + text.str());
  }
  return library;
}

std::vector<uint8_t> readBinary(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// One library per case: the template at the case's hidden size and target.
std::string buildKernel(const Case& c) {
  return compileKernel(caseName(c), std::string("--template ") + c.tpl->name + " --set hidden=" +
                                        std::to_string(c.hidden) + " --target " + c.target->name);
}

void PrintTo(const Case& c, std::ostream* os) { *os << caseName(c); }

class HostTemplate : public ::testing::TestWithParam<Case> {};

TEST_P(HostTemplate, MatchesNumericsBitExactly) {
  const Case c = GetParam();
  const std::string library = buildKernel(c);
  // The runtime's host device runs it: one thread per warp, 2 blocks of 4 warps.
  auto device = make_host_device();
  auto module = device->load_module(readBinary(library));
  const Kernel kernel = module->kernel(c.tpl->name);
  auto stream = device->create_stream();
  for (int tokens : kTokenCounts) {
    testing::checkTemplate(c.tpl->kind, c.target->fp8, c.hidden, tokens,
                           [&](std::vector<testing::KernelBuffer>& buffers, size_t count) {
                             KernelArgs args;
                             for (testing::KernelBuffer& buffer : buffers) args.add<void*>(buffer.data);
                             args.add(count);
                             device->launch(kernel, {2, 4}, args, *stream);
                             stream->synchronize();
                           });
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, HostTemplate, ::testing::ValuesIn(allCases()),
                         [](const auto& info) { return caseName(info.param); });

// ep.block_any on the host device: each warp is a thread, and a block's
// warps share the launcher's vote word (tests/common/block_vote_check.h).
TEST(HostBlockVote, EveryWarpOfABlockGetsTheBlocksAnswer) {
  const std::string library =
      compileKernel("block_vote", std::string("--input ") + EPJIT_TEST_INPUTS_DIR + "/block_vote.mlir --target host");
  auto device = make_host_device();
  auto module = device->load_module(readBinary(library));
  auto stream = device->create_stream();
  constexpr uint32_t kBlocks = 13;
  testing::checkBlockVote(*device, kBlocks, [&](void* flags, void* out) {
    KernelArgs args;
    args.add(flags).add(out);
    device->launch(module->kernel("block_vote"), {kBlocks, testing::kBlockVoteWarps}, args, *stream);
    stream->synchronize();
  });
}

// ep.warp.sum_rows with weighted sources on the host device: DeepEP's
// low-latency combine bits (tests/common/weighted_sum_check.h).
TEST(HostWeightedSum, FusedMultiplyAddsInSourceOrderFromPlusZero) {
  const std::string library = compileKernel(
      "weighted_sum", std::string("--input ") + EPJIT_TEST_INPUTS_DIR + "/weighted_sum.mlir --target host");
  auto device = make_host_device();
  auto module = device->load_module(readBinary(library));
  auto stream = device->create_stream();
  testing::checkWeightedSum(*device, [&](void* rows, void* weights, void* valid, void* out, size_t count) {
    KernelArgs args;
    args.add(rows).add(weights).add(valid).add(out).add(count);
    device->launch(module->kernel("weighted_sum"), {1, testing::kWeightedSumWarps}, args, *stream);
    stream->synchronize();
  });
}

// ep.warp.quantize with DeepEP's per-128 cast on the host device: its codes
// and scales in its low-latency layouts (tests/common/deepep_cast_check.h).
TEST(HostDeepEpCast, CodesAndScalesAreDeepEpsInItsLayouts) {
  const std::string library = compileKernel(
      "deepep_cast", std::string("--input ") + EPJIT_TEST_INPUTS_DIR + "/deepep_cast.mlir --target host");
  auto device = make_host_device();
  auto module = device->load_module(readBinary(library));
  auto stream = device->create_stream();
  testing::checkDeepEpCast(*device, [&](const std::string& kernel, void* input, void* codes, void* scales,
                                        size_t tokens, size_t hidden) {
    KernelArgs args;
    args.add(input).add(codes).add(scales).add(tokens).add(hidden);
    device->launch(module->kernel(kernel), {2, testing::kDeepEpCastWarps}, args, *stream);
    stream->synchronize();
  });
}

}  // namespace
}  // namespace epjit
