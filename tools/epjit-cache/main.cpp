// epjit-cache: inspect and maintain a kernel cache directory.
//   epjit-cache ls | verify | stats | prune [--max-bytes N] | rm KEY   [--cache-dir DIR]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "epjit/cache.h"
#include "epjit/error.h"

int main(int argc, char** argv) {
  CLI::App app{"epjit-cache: inspect and maintain a kernel cache"};
  std::string cache_dir;
  app.add_option("--cache-dir", cache_dir, "cache directory (default: EPJIT_CACHE_DIR)");
  app.require_subcommand(1);
  CLI::App* ls = app.add_subcommand("ls", "list entries: key, bytes, last use, specialization, toolchain");
  CLI::App* verify = app.add_subcommand("verify", "check every entry's manifest and checksum; non-zero if any is bad");
  CLI::App* stats = app.add_subcommand("stats", "entries and bytes");
  CLI::App* prune = app.add_subcommand("prune", "quarantine bad entries, drop dead staging, evict by last use");
  uint64_t max_bytes = 0;
  prune->add_option("--max-bytes", max_bytes, "evict least recently used entries above this size");
  CLI::App* rm = app.add_subcommand("rm", "remove one entry (moved to quarantine/)");
  std::string key;
  rm->add_option("key", key, "the entry's key")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    if (cache_dir.empty()) cache_dir = epjit::CacheOptions::from_environment().dir;
    if (cache_dir.empty()) {
      std::cerr << "epjit-cache: error: no cache directory: pass --cache-dir or set EPJIT_CACHE_DIR\n";
      return 2;
    }
    if (ls->parsed() || verify->parsed() || stats->parsed()) {
      const auto entries = epjit::list_cache_entries(cache_dir, true);
      size_t bad = 0;
      uint64_t bytes = 0;
      for (const epjit::CacheEntryInfo& entry : entries) {
        bytes += entry.bytes;
        bad += !entry.problem.empty();
        if (ls->parsed())
          std::printf("%s %10llu %lld %s [%s]%s%s\n", entry.key.c_str(), (unsigned long long)entry.bytes,
                      (long long)entry.last_use_ns, entry.spec.c_str(), entry.toolchain.c_str(),
                      entry.problem.empty() ? "" : " BAD: ", entry.problem.c_str());
        if (verify->parsed())
          std::printf("%s %s\n", entry.problem.empty() ? "ok " : "BAD", (entry.key + " " +
                      (entry.problem.empty() ? entry.spec : entry.problem)).c_str());
      }
      if (stats->parsed() || verify->parsed())
        std::printf("%zu entries, %llu bytes, %zu bad\n", entries.size(), (unsigned long long)bytes, bad);
      return verify->parsed() && bad ? 1 : 0;
    }
    if (prune->parsed()) {
      const epjit::PruneResult result = epjit::prune_cache(cache_dir, max_bytes);
      std::printf("quarantined %zu, removed %zu stale staging, evicted %zu; %llu bytes left\n", result.quarantined,
                  result.staging_removed, result.evicted, (unsigned long long)result.bytes_after);
      return 0;
    }
    if (rm->parsed()) {
      if (!epjit::remove_cache_entry(cache_dir, key)) {
        std::cerr << "epjit-cache: error: no entry " << key << " in " << cache_dir << "\n";
        return 1;
      }
      std::printf("removed %s\n", key.c_str());
    }
  } catch (const epjit::Error& error) {
    std::cerr << "epjit-cache: error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
