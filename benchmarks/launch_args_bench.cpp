// The host's own work per EP kernel launch before the driver call (Google
// Benchmark): setting ep_dispatch's arguments by name, ordering them into
// KernelArgs, and the launch check every device runs. A small eager call's
// leg waits for this work, so it adds to the call's latency one for one.
#include <benchmark/benchmark.h>

#include "epjit/device.h"
#include "epjit/kernel_interface.h"
#include "epjit/kernel_module.h"

namespace {

using namespace epjit;

// ep_dispatch's signature as its interface record states it at top-8,
// each pointer with the alignment it needs (checked as it is set).
KernelSignature dispatchSignature() {
  KernelSignature signature{"ep_dispatch", 17, {}};
  auto pointer = [&](const char* name, const char* type, size_t alignment) {
    signature.params.push_back({name, type, ParamKind::Pointer, 8, alignment});
  };
  auto index = [&](const char* name) { signature.params.push_back({name, "index", ParamKind::Index, 8}); };
  pointer("input", "ptr<i32>", 16);
  pointer("weights", "ptr<f32>", 16);
  pointer("scales", "ptr<i8>", 1);
  pointer("indices", "ptr<i32>", 16);
  pointer("route", "ptr<i32>", 4);
  index("tokens");
  index("rank");
  index("replay");
  index("forward");
  pointer("kept_from", "ptr<i32>", 16);
  pointer("kept_indices", "ptr<i32>", 16);
  index("keep");
  pointer("kept_origins", "ptr<i32>", 16);
  index("keep_origins");
  index("phases");
  signature.params.push_back({"w", "window", ParamKind::Window, sizeof(Window)});
  return signature;
}

void BM_DispatchArguments(benchmark::State& state) {
  const KernelSignature signature = dispatchSignature();
  Kernel kernel;
  kernel.name = "ep_dispatch";
  kernel.signature = &signature;
  Window window{};
  alignas(16) int buffer[4] = {};
  for (auto _ : state) {
    KernelArgs args = LaunchArgs(kernel)
                          .set("input", buffer)
                          .set("weights", buffer)
                          .set("scales", nullptr)
                          .set("indices", buffer)
                          .set("route", buffer)
                          .set("tokens", int64_t(1))
                          .set("rank", 0)
                          .set("replay", false)
                          .set("forward", false)
                          .set("kept_from", nullptr)
                          .set("kept_indices", nullptr)
                          .set("keep", false)
                          .set("kept_origins", nullptr)
                          .set("keep_origins", false)
                          .set("phases", 3)
                          .set("w", window)
                          .build();
    check_launch(kernel, {128, 16}, args);
    benchmark::DoNotOptimize(args.pointers());
  }
}
BENCHMARK(BM_DispatchArguments)->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
