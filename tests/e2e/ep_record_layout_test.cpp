// The layout of the buffers the op allocates for its kernels is written once,
// in templates/ep/buffers.mlir: a copy of that template with three more words
// in the route map, ahead of the received count, compiled in place of the
// built-in one, must run unchanged through the runtime. The kernels reach the
// parts through ep.buffer_offset, the op through the interface record, so
// combine, replay, recorded_call() and a route_map()/load_routing() round trip
// agree with the reference, intranode and internode (where the route's sent
// counts and forward route are read back and checked by load_routing()).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/ep_harness.h"
#include "epjit/error.h"
#include "epjit/kernel_source.h"

#ifdef EPJIT_TEST_COMPILE_TOOL

namespace epjit::testing {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The built-in ep/buffers with a part of three words before @route_received.
// Written once per process, into a directory of its own (test processes run at once).
fs::path writeChangedTemplates() {
  const fs::path dir = fs::path(EPJIT_TEST_WORK_DIR) / ("changed-templates-" + std::to_string(getpid()));
  fs::create_directories(dir / "ep");
  std::string text = readFile(fs::path(EPJIT_TEST_TEMPLATES_DIR) / "ep" / "buffers.mlir");
  const std::string anchor = "ep.buffer_part @route_received";
  const size_t at = text.find(anchor);
  if (at == std::string::npos) return {};
  text.insert(at,
              "ep.buffer_part @route_spare in \"route\" : i32 attributes {meaning = \"three words no kernel reads\"} {\n"
              "  %c3 = arith.constant 3 : index\n"
              "  ep.yield %c3 : index\n"
              "}\n");
  std::ofstream(dir / "ep" / "buffers.mlir", std::ios::binary) << text;
  return dir;
}
const fs::path& changedTemplates() {
  static const struct Written {
    fs::path dir = writeChangedTemplates();
    ~Written() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } written;
  return written.dir;
}

// epjit-compile with `dir` searched before the built-in templates.
class ChangedTemplateSource final : public KernelSource {
 public:
  explicit ChangedTemplateSource(fs::path dir) : dir_(std::move(dir)) {}

  GeneratedSource generate(const KernelSpec& spec) const override {
    return {run(spec, "hip"), run(spec, "interface")};
  }
  std::string describe() const override { return "epjit-compile --include-dir " + dir_.string(); }

 private:
  std::string run(const KernelSpec& spec, const std::string& emit) const {
    // Ranks (threads) and test processes generate at once: a file of each call's own.
    static std::atomic<int> calls{0};
    const fs::path out = dir_ / ("generated-" + std::to_string(getpid()) + "-" + std::to_string(calls++) + "." + emit);
    std::string command = std::string(EPJIT_TEST_COMPILE_TOOL) + " --template " + spec.template_name +
                          " --target " + spec.target + " --include-dir " + dir_.string() + " --emit " + emit +
                          " -o " + out.string();
    for (const auto& [key, value] : spec.params) command += " --set " + key + "=" + value;
    if (std::system(command.c_str()) != 0) throw Error("epjit-compile failed: " + command, "0", "see its output");
    std::string text = readFile(out);
    fs::remove(out);
    return text;
  }
  fs::path dir_;
};

KernelCache& changedCache() {
  static KernelCache cache(
      [] {
        CacheOptions options;  // memory only: the built-in templates' keys name other kernels
        options.opt_level = 1;
        return options;
      }(),
      std::make_shared<ChangedTemplateSource>(changedTemplates()));
  return cache;
}

TEST(RecordLayout, TheRouteMapFollowsTheTemplate) {
  ASSERT_FALSE(changedTemplates().empty()) << "templates/ep/buffers.mlir declares no @route_received";
  EpCase c;
  c.name = "layout";
  c.world = 1;
  const auto device = make_host_device();
  const UniqueId id = Communicator::get_unique_id();
  auto comm = Communicator::init(1, 0, id, *device, {60, std::nullopt});
  EpDispatchCombineOp built_in(configFor(c, 0), *comm, {&e2eCache(EPJIT_TEST_WORK_DIR), nullptr});
  EpDispatchCombineOp changed(configFor(c, 0), *comm, {&changedCache(), nullptr});
  const BufferInfo& before = built_in.interface().buffer("route");
  const BufferInfo& after = changed.interface().buffer("route");
  EXPECT_EQ(after.bytes, before.bytes + 12);
  EXPECT_EQ(after.part("route_spare").offset, before.part("route_received").offset);
  EXPECT_EQ(after.part("route_received").offset, before.part("route_received").offset + 12);
  EXPECT_EQ(after.part("route_sent").offset, before.part("route_sent").offset + 12);
  auto routing = changed.make_routing();
  std::vector<int32_t> none(size_t(c.max_tokens * c.topk), -1);
  const std::vector<float> weights(none.size(), 1.0f);
  std::vector<uint16_t> tokens(size_t(c.max_tokens * c.hidden), 0);
  const TensorRef input = tensor(tokens.data(), DType::BF16, {0, c.hidden});
  changed.dispatch(input, tensor(const_cast<float*>(weights.data()), DType::F32, {0, c.topk}), std::nullopt,
                   tensor(none.data(), DType::I32, {0, c.topk}), routing.get());
  changed.combine(changed.combine_input(), std::nullopt);
  EXPECT_EQ(changed.route_map(*routing).shape[0], int64_t(after.bytes / 4));
  comm->destroy();
}

// The whole e2e run of a case (reference, replays, kept calls, map round trips).
void expectRunsUnchanged(const EpCase& c) {
  const std::string failures = runRanks(
      c.world, Ranks::Threads, changedCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) { return runRank(c, rank, comm, cache); },
      c.gpu_per_node);
  EXPECT_EQ(failures, "");
}

TEST(RecordLayout, IntranodeRoundTripsAndReplaysThroughSavedMaps) {
  EpCase c;
  c.name = "intranode";
  c.replay = true;
  c.replay_through_map = true;
  expectRunsUnchanged(c);
}

TEST(RecordLayout, InternodeV2RoundTripsAndReplaysThroughSavedMaps) {
  EpCase c;
  c.name = "internode v2";
  c.world = 4;
  c.gpu_per_node = 2;
  c.internode_kernel = InternodeKernel::V2;
  c.replay = true;
  c.replay_through_map = true;
  c.calls = {37, 5, 0};
  expectRunsUnchanged(c);
}

}  // namespace
}  // namespace epjit::testing

#endif  // EPJIT_TEST_COMPILE_TOOL
