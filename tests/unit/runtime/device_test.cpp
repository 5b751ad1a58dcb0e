// Devices: templates fetched from the cache and run on the host device match
// numerics.h; the GPU drivers load their symbol tables or say what is missing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "../../../runtime/core/environment.h"
#include "../../../runtime/device/driver_error_advice.h"
#include "../../common/work_dir.h"
#include "epjit/cache.h"
#include "epjit/device.h"
#include "epjit/error.h"
#include "epjit/numerics.h"

namespace epjit {
namespace {

using testing::freshDir;

// quantize_mxfp4 then dequantize_mxfp4 through the runtime on the host device.
TEST(HostDevice, RunsTemplatesFromTheCacheBitExactly) {
  CacheOptions options;
  options.dir = freshDir("device-cache");
  options.opt_level = 1;
  KernelCache cache(options);
  auto device = make_host_device();
  auto stream = device->create_stream();
  const int hidden = 96, tokens = 37;
  const KernelSpec quantize{"quantize_mxfp4", {{"hidden", std::to_string(hidden)}}, "host-gfx950"};
  const KernelSpec dequantize{"dequantize_mxfp4", {{"hidden", std::to_string(hidden)}}, "host-gfx950"};
  auto q_module = device->load_module(cache.get(quantize)->binary);
  auto d_module = device->load_module(cache.get(dequantize)->binary);

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<uint16_t> x(size_t(tokens) * hidden);
  for (uint16_t& v : x) v = encode_bf16(normal(rng));
  const int blocks = hidden / 32;
  auto* dx = static_cast<uint16_t*>(device->allocate(x.size() * 2));
  auto* dq = static_cast<uint8_t*>(device->allocate(x.size() / 2));
  auto* ds = static_cast<uint8_t*>(device->allocate(size_t(tokens) * blocks));
  auto* dy = static_cast<uint16_t*>(device->allocate(x.size() * 2));
  device->copy_to_device(dx, x.data(), x.size() * 2);
  std::memset(dy, 0xFF, x.size() * 2);
  const size_t count = tokens;
  KernelArgs qargs, dargs;
  qargs.add<void*>(dx).add<void*>(dq).add<void*>(ds).add(count);
  dargs.add<void*>(dq).add<void*>(ds).add<void*>(dy).add(count);
  device->launch(q_module->kernel("quantize_mxfp4"), {3, 4}, qargs, *stream);
  device->launch(d_module->kernel("dequantize_mxfp4"), {3, 4}, dargs, *stream);
  stream->synchronize();

  std::vector<uint16_t> y(x.size());
  device->copy_to_host(y.data(), dy, y.size() * 2);
  for (int t = 0; t < tokens; ++t) {
    for (int b = 0; b < blocks; ++b) {
      float block[32], decoded[32];
      uint8_t packed[16];
      for (int i = 0; i < 32; ++i) block[i] = decode_bf16(x[size_t(t) * hidden + b * 32 + i]);
      const uint8_t scale = quantize_mx_block(block, 32, MxElement::E2M1, packed);
      dequantize_mx_block(packed, 32, MxElement::E2M1, scale, decoded);
      for (int i = 0; i < 32; ++i)
        ASSERT_EQ(y[size_t(t) * hidden + b * 32 + i], encode_bf16(decoded[i])) << "token " << t << " element " << b * 32 + i;
    }
  }
  for (void* p : {(void*)dx, (void*)dq, (void*)ds, (void*)dy}) device->release(p);
}

TEST(HostDevice, EventsTimeAStreamAndSharedMemoryMapsTwice) {
  auto device = make_host_device();
  auto stream = device->create_stream();
  auto start = device->create_event(EventUse::timing), stop = device->create_event(EventUse::timing);
  start->record(*stream);
  stop->record(*stream);
  stop->synchronize();
  EXPECT_GE(stop->elapsed_ms(*start), 0.0f);
  ShareableMemory shared = device->allocate_shareable(4096);
  void* again = device->open_shareable(shared);
  static_cast<int*>(shared.pointer)[10] = 1234;
  EXPECT_EQ(static_cast<int*>(again)[10], 1234);
  device->close_shareable(again, 4096);
  device->close_shareable(shared.pointer, 4096);
}

// A completion event marks a point of the stream like a timing one, but has
// no time: asking for one is an error that says which events to create.
TEST(HostDevice, CompletionEventsCompleteButHaveNoTime) {
  auto device = make_host_device();
  auto stream = device->create_stream();
  auto start = device->create_event(EventUse::timing), passed = device->create_event(EventUse::completion);
  EXPECT_EQ(passed->use(), EventUse::completion);
  start->record(*stream);
  passed->record(*stream);
  passed->synchronize();
  EXPECT_TRUE(passed->completed());
  try {
    (void)passed->elapsed_ms(*start);
    FAIL() << "a completion event gave a time";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("EventUse::timing"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)start->elapsed_ms(*passed), Error);
}

// A driver call refused because a graph is being captured (CUDA and HIP share
// the codes 900-908: torch.cuda.graph's global mode forbids a wait on any
// stream, for one) says so and how to get out of it, not "check the GPU";
// the codes around them still point at the GPU.
// A stream that waits for an event starts its later work once the event's
// stream has passed the record: a copy on stream B of what stream A writes
// after a long copy of its own reads all of it (without the wait B's copy
// runs while A is still on its first copy, and reads zeros). An event never
// recorded orders nothing.
TEST(HostDevice, AStreamWaitsForAnEventRecordedOnAnother) {
  auto device = make_host_device();
  auto a = device->create_stream(), b = device->create_stream();
  constexpr size_t kBytes = size_t(64) << 20;
  std::vector<uint8_t> source(kBytes), scratch(kBytes), middle(kBytes, 0), last(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = uint8_t(i * 2654435761u >> 24);
  auto never = device->create_event(EventUse::completion);
  never->enqueue_wait(*b);
  b->synchronize();  // returns: nothing to wait for
  for (int round = 0; round < 3; ++round) {
    std::fill(middle.begin(), middle.end(), uint8_t(0));
    std::fill(last.begin(), last.end(), uint8_t(0));
    auto written = device->create_event(EventUse::completion);
    device->copy_async(scratch.data(), source.data(), kBytes, *a);
    device->copy_async(middle.data(), source.data(), kBytes, *a);
    written->record(*a);
    written->enqueue_wait(*b);
    device->copy_async(last.data(), middle.data(), kBytes, *b);
    b->synchronize();
    EXPECT_TRUE(written->completed());
    EXPECT_EQ(std::memcmp(last.data(), source.data(), kBytes), 0) << "round " << round;
  }
}

TEST(DriverErrors, CaptureErrorsPointAtTheCaptureNotTheGpu) {
  for (int status = 900; status <= 908; ++status) {
    const DriverErrorAdvice advice = driver_error_advice(status, "CUDA device", "nvidia-smi", "CUDA_VISIBLE_DEVICES");
    EXPECT_NE(advice.expected.find("graph capture"), std::string::npos) << status << ": " << advice.expected;
    EXPECT_NE(advice.fix.find("outside the capture"), std::string::npos) << status << ": " << advice.fix;
    EXPECT_EQ(advice.fix.find("nvidia-smi"), std::string::npos) << status;
  }
  for (int status : {1, 2, 719, 899, 909, 999}) {
    const DriverErrorAdvice advice = driver_error_advice(status, "AMD GPU", "rocm-smi", "HIP_VISIBLE_DEVICES");
    EXPECT_EQ(advice.expected, "a working AMD GPU") << status;
    EXPECT_EQ(advice.fix, "check the GPU with rocm-smi; HIP_VISIBLE_DEVICES may hide it") << status;
  }
}

// The host device runs launches in order on one thread per warp: nothing
// overlaps, whatever the kernels' records say.
TEST(HostDevice, NeverOverlapsDependentLaunches) {
  EXPECT_FALSE(make_host_device()->overlaps_dependent_launches());
}

// EPJIT_DEPENDENT_LAUNCH and switches like it: exactly 0 or 1, never a guess.
TEST(Environment, ASwitchIsZeroOrOneAndNothingElse) {
  const char* name = "EPJIT_TEST_SWITCH";
  unsetenv(name);
  EXPECT_TRUE(environment_switch(name, true, "x"));
  EXPECT_FALSE(environment_switch(name, false, "x"));
  setenv(name, "0", 1);
  EXPECT_FALSE(environment_switch(name, true, "x"));
  setenv(name, "1", 1);
  EXPECT_TRUE(environment_switch(name, false, "x"));
  for (const char* wrong : {"yes", "on", "2", "01", " 1", "true"}) {
    setenv(name, wrong, 1);
    try {
      environment_switch(name, true, "launch plainly");
      ADD_FAILURE() << "'" << wrong << "' was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string("EPJIT_TEST_SWITCH is '") + wrong + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("0 or 1"), std::string::npos) << message;
      EXPECT_NE(message.find("set 0 to launch plainly"), std::string::npos) << message;
    }
  }
  unsetenv(name);
}

TEST(HostDevice, HasNoGraphsAndSaysSo) {
  auto device = make_host_device();
  auto stream = device->create_stream();
  EXPECT_FALSE(device->supports_graphs());
  try {
    device->begin_capture(*stream);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no graph capture"), std::string::npos);
  }
}

// The host binary of quantize_fp8_direct (hidden 64), from a cache in `scratch`.
std::vector<uint8_t> quantizeBinary(const std::string& scratch) {
  CacheOptions options;
  options.dir = freshDir(scratch);
  options.opt_level = 1;
  KernelCache cache(options);
  return cache.get({"quantize_fp8_direct", {{"hidden", "64"}}, "host"})->binary;
}

// quantize_fp8_direct's arguments for a call of no tokens (nothing is read).
KernelArgs noTokens() {
  KernelArgs args;
  const size_t none = 0;
  args.add<void*>(nullptr).add<void*>(nullptr).add(none);
  return args;
}

// A host launch is one thread per warp: a grid beyond the device's warp
// bound is refused when launched, and the op's schedule is cut to fit it.
TEST(HostDevice, AGridBeyondTheWarpBoundIsRefusedAtLaunch) {
  auto device = make_host_device();
  auto module = device->load_module(quantizeBinary("device-big-grid"));
  const Kernel kernel = module->kernel("quantize_fp8_direct");
  EXPECT_EQ(device->resident_blocks(kernel, 4), 1024u);
  EXPECT_EQ(device->resident_blocks(kernel, 5000), 0u);
  auto stream = device->create_stream();
  try {
    device->launch(kernel, {40000, 4}, noTokens(), *stream);
    FAIL() << "a 160000-warp grid was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("at most 4096 warps per launch"), std::string::npos) << error.what();
  }
}

// When the machine refuses a warp thread mid-launch (here: a child limited to
// a few processes), no warp of the grid runs, nothing escapes the stream's
// thread, and synchronize() reports it; the stream keeps working.
TEST(HostDevice, ARefusedWarpThreadIsAnErrorAtSynchronize) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the child drops to nobody, whose process limit applies";
  const auto binary = quantizeBinary("device-refused-thread");
  const pid_t child = fork();
  if (child == 0) {
    auto device = make_host_device();
    auto module = device->load_module(binary);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    const rlimit few{16, 16};
    if (setrlimit(RLIMIT_NPROC, &few) != 0) _exit(11);
    auto stream = device->create_stream();
    const Kernel kernel = module->kernel("quantize_fp8_direct");
    const KernelArgs args = noTokens();
    device->launch(kernel, {64, 4}, args, *stream);
    try {
      stream->synchronize();
      _exit(12);
    } catch (const Error& error) {
      if (std::string(error.what()).find("could not start 256 warp threads") == std::string::npos) _exit(13);
    }
    device->launch(kernel, {1, 1}, args, *stream);  // zero tokens: runs and returns
    stream->synchronize();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(HostDevice, AModuleWithoutTheKernelSaysSo) {
  auto device = make_host_device();
  auto module = device->load_module(quantizeBinary("device-missing-kernel"));
  try {
    module->kernel("dispatch");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("kernel 'dispatch' is not in the host module"), std::string::npos);
  }
}

TEST(CudaDevice, WithoutADriverTheErrorNamesWhatWasLookedFor) {
  try {
    make_cuda_device(0);
    GTEST_SKIP() << "a CUDA driver is present here";
  } catch (const Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("libcuda.so.1"), std::string::npos) << what;
    EXPECT_NE(what.find("NVIDIA driver"), std::string::npos) << what;
  }
}

// A survey reads an API's GPUs in a child process: whatever it finds, this
// process has not loaded the driver (a process that forks rank processes
// must not have), and where no GPU opens the error names what was missing.
TEST(GpuSurvey, ReadsTheGpusInAChildAndLeavesTheDriverUnloadedHere) {
  const std::pair<const char*, std::vector<const char*>> apis[] = {
      {"cuda", {"libcuda.so.1", "libcuda.so"}},
      {"hip", {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"}}};
  for (const auto& [kind, libraries] : apis) {
    const GpuSurvey survey = survey_gpus(kind);
    for (const char* library : libraries)
      EXPECT_EQ(dlopen(library, RTLD_LAZY | RTLD_NOLOAD), nullptr) << kind << ": " << library << " loaded here";
    if (survey.count > 0) {
      EXPECT_FALSE(survey.target.empty()) << kind;
      EXPECT_FALSE(survey.error.has_value()) << kind;
      EXPECT_NE(find_target(survey.target), nullptr) << survey.target;
      continue;
    }
    ASSERT_TRUE(survey.error.has_value()) << kind << ": no GPU and no reason";
    const std::string what = survey.error->what();
    EXPECT_NE(what.find(std::string(kind) == "cuda" ? "libcuda" : "libamdhip64"), std::string::npos) << what;
    EXPECT_FALSE(survey.error->fix().empty()) << what;
  }
  try {
    survey_gpus("host");
    FAIL() << "a survey of the host device";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cuda or hip"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace epjit
