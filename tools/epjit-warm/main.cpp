// epjit-warm: fills a kernel cache ahead of time from a JSON manifest, and
// moves warmed caches between machines as bundles.
//
//   epjit-warm MANIFEST.json [-j N] [--cache-dir DIR] [--json] [--export FILE]
//   epjit-warm --import FILE [--cache-dir DIR] [--json]
//
// Manifest: {"targets": ["gfx950", "host"],
//            "kernels": [{"template": "quantize_mxfp4", "params": {"hidden": 7168}}]}
// Every kernel is built for every target (a kernel may list its own "targets").
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "epjit/cache.h"
#include "epjit/error.h"

namespace {

using nlohmann::json;

std::vector<epjit::KernelSpec> read_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw epjit::Error("cannot read the manifest " + path, "an existing JSON file", "check the path");
  json manifest = json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("kernels") ||
      !manifest["kernels"].is_array()) {
    throw epjit::Error(path + " is not a warm manifest",
                       "{\"targets\": [...], \"kernels\": [{\"template\": NAME, \"params\": {...}}]}",
                       "fix the manifest (docs/CACHE.md shows one)");
  }
  std::vector<epjit::KernelSpec> specs;
  for (const json& kernel : manifest["kernels"]) {
    if (!kernel.is_object() || !kernel.contains("template") || !kernel["template"].is_string())
      throw epjit::Error("a kernel in " + path + " has no \"template\"", "\"template\": NAME", "name the template");
    const json& targets = kernel.contains("targets") ? kernel["targets"] : manifest.value("targets", json::array());
    if (!targets.is_array() || targets.empty())
      throw epjit::Error("kernel " + kernel["template"].get<std::string>() + " in " + path + " has no targets",
                         "\"targets\": [\"gfx950\", ...] at the top or in the kernel", "list the targets");
    const json params = kernel.value("params", json::object());
    for (const json& target : targets) {
      epjit::KernelSpec spec;
      spec.template_name = kernel["template"].get<std::string>();
      spec.target = target.get<std::string>();
      for (const auto& [name, value] : params.items())
        spec.params[name] = value.is_string() ? value.get<std::string>() : value.dump();
      specs.push_back(std::move(spec));
    }
  }
  return specs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epjit-warm: build kernels into the cache ahead of time"};
  std::string manifest_path, cache_dir, export_path, import_path;
  int jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  bool as_json = false;
  app.add_option("manifest", manifest_path, "JSON manifest of kernels and targets");
  app.add_option("-j,--jobs", jobs, "kernels built in parallel")->check(CLI::PositiveNumber);
  app.add_option("--cache-dir", cache_dir, "cache directory (overrides EPJIT_CACHE_DIR)");
  app.add_flag("--json", as_json, "print one JSON summary on stdout at the end");
  app.add_option("--export", export_path, "then write every entry of the cache into one bundle FILE");
  app.add_option("--import", import_path, "install the entries of a bundle FILE, verifying each");
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  json summary = {{"compiled", 0}, {"hits", 0}, {"failed", 0}};
  try {
    epjit::CacheOptions options = epjit::CacheOptions::from_environment();
    if (!cache_dir.empty()) options.dir = cache_dir;
    epjit::KernelCache cache(options);
    if (manifest_path.empty() && import_path.empty()) {
      std::cerr << "epjit-warm: error: give a manifest to warm or --import FILE\n";
      return 2;
    }
    if (!import_path.empty()) {
      const epjit::KernelCache::ImportResult imported = cache.import_bundle(import_path);
      summary["imported"] = imported.imported;
      summary["already_present"] = imported.already_present;
      summary["failed"] = summary["failed"].get<int>() + int(imported.rejected);
      for (const std::string& problem : imported.problems) std::cerr << "epjit-warm: rejected " << problem << "\n";
    }
    if (!manifest_path.empty()) {
      const std::vector<epjit::KernelSpec> specs = read_manifest(manifest_path);
      std::atomic<size_t> next{0}, done{0};
      std::atomic<int> failed{0};
      std::mutex output;
      const bool terminal = isatty(STDERR_FILENO);
      auto worker = [&] {
        for (size_t i = next++; i < specs.size(); i = next++) {
          try {
            cache.get(specs[i]);
          } catch (const epjit::Error& error) {
            failed++;
            std::lock_guard lock(output);
            std::cerr << (terminal ? "\r\033[K" : "") << "epjit-warm: " << specs[i].canonical() << ": " << error.what()
                      << "\n";
          }
          const size_t finished = ++done;
          if (terminal) {
            std::lock_guard lock(output);
            std::cerr << "\r\033[K[" << finished << "/" << specs.size() << "] " << specs[i].canonical() << std::flush;
          }
        }
      };
      std::vector<std::thread> threads;
      for (int t = 0; t < std::min<int>(jobs, int(specs.size())); ++t) threads.emplace_back(worker);
      for (std::thread& thread : threads) thread.join();
      if (terminal) std::cerr << "\r\033[K";
      const epjit::CacheStats stats = cache.stats();
      summary["compiled"] = stats.compiles;
      // Every kernel that succeeded was either compiled here or found (on disk, or published by another process).
      const uint64_t succeeded = specs.size() - uint64_t(failed.load());
      summary["hits"] = succeeded - std::min<uint64_t>(succeeded, stats.compiles);
      summary["failed"] = summary["failed"].get<int>() + failed.load();
      summary["kernels"] = specs.size();
      summary["compile_seconds"] = stats.compile_seconds;
    }
    if (!export_path.empty()) summary["exported"] = cache.export_bundle(export_path);
    summary["cache_dir"] = cache.memory_only() ? "" : cache.options().dir;
  } catch (const epjit::Error& error) {
    std::cerr << "epjit-warm: error: " << error.what() << "\n";
    return 1;
  }
  summary["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (as_json) {
    std::cout << summary.dump() << "\n";
  } else {
    std::cerr << "epjit-warm: " << summary["compiled"] << " compiled, " << summary["hits"] << " already cached, "
              << summary["failed"] << " failed in " << summary["seconds"].get<double>() << " s\n";
  }
  return summary["failed"].get<int>() == 0 ? 0 : 1;
}
