// Kernel cache and toolchain latencies (Google Benchmark): in-memory hit,
// disk hit with module load on the host device, source generation, and a
// cold compile per toolchain and target. Results go to docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "epjit/cache.h"
#include "epjit/device.h"
#include "epjit/kernel_source.h"
#include "epjit/targets/TargetInfo.h"
#include "epjit/toolchain.h"

namespace {

using namespace epjit;

std::string benchDir(const char* name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/epjit-bench-" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

const KernelSpec kSpec{"quantize_fp8_direct", {{"hidden", "7168"}}, "host"};

void BM_MemoryHit(benchmark::State& state) {
  CacheOptions options;
  options.dir = benchDir("memory");
  KernelCache cache(options);
  cache.get(kSpec);
  for (auto _ : state) benchmark::DoNotOptimize(cache.get(kSpec));
}
BENCHMARK(BM_MemoryHit);

// A new process's first use of a warm disk cache: open the cache, verify and
// read the entry, load it on the host device.
void BM_DiskHitWithModuleLoad(benchmark::State& state) {
  CacheOptions options;
  options.dir = benchDir("disk");
  { KernelCache(options).get(kSpec); }
  auto device = make_host_device();
  for (auto _ : state) {
    KernelCache cache(options);
    auto module = device->load_module(cache.get(kSpec)->binary);
    benchmark::DoNotOptimize(module->kernel("quantize_fp8_direct"));
  }
}
BENCHMARK(BM_DiskHitWithModuleLoad)->Unit(benchmark::kMicrosecond);

void BM_GenerateSource(benchmark::State& state) {
  auto source = load_compiler_source();
  if (!source) return state.SkipWithError("no compiler provider");
  for (auto _ : state) benchmark::DoNotOptimize(source->generate({"quantize_mxfp4", {{"hidden", "7168"}}, "gfx950"}));
}
BENCHMARK(BM_GenerateSource)->Unit(benchmark::kMillisecond);

// Cold compile of generated source: toolchain x target.
void BM_ColdCompile(benchmark::State& state, std::unique_ptr<Toolchain> (*make)(), const char* target_name,
                    const char* template_name) {
  auto source = load_compiler_source();
  if (!source) return state.SkipWithError("no compiler provider");
  const TargetInfo* target = find_target(target_name);
  const std::string text = source->generate({template_name, {{"hidden", "7168"}}, target_name}).source;
  std::unique_ptr<Toolchain> toolchain;
  try {
    toolchain = make();
  } catch (const std::exception& error) {
    return state.SkipWithError(error.what());
  }
  for (auto _ : state) benchmark::DoNotOptimize(toolchain->compile({text, "kernel", target, 3}).bytes.size());
  state.SetLabel(toolchain->identity());
}
BENCHMARK_CAPTURE(BM_ColdCompile, clang_gfx942_fp8, make_clang_toolchain, "gfx942", "quantize_fp8_direct")
    ->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_ColdCompile, clang_gfx950_mxfp4, make_clang_toolchain, "gfx950", "quantize_mxfp4")
    ->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_ColdCompile, clang_gfx1250_mxfp4, make_clang_toolchain, "gfx1250", "quantize_mxfp4")
    ->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_ColdCompile, nvrtc_sm90_fp8, make_nvrtc_toolchain, "sm90", "quantize_fp8_direct")
    ->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_ColdCompile, hostcxx_host_fp8, make_host_cxx_toolchain, "host", "quantize_fp8_direct")
    ->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
