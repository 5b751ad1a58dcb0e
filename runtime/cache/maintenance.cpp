// epjit-cache's operations on a cache directory.
#include <nlohmann/json.hpp>

#include "disk_tier.h"
#include "epjit/cache.h"

namespace epjit {

std::vector<CacheEntryInfo> list_cache_entries(const std::string& dir, bool verify) {
  cache::DiskTier tier(dir);
  std::vector<CacheEntryInfo> entries;
  for (const std::string& key : tier.keys()) {
    CacheEntryInfo info;
    info.key = key;
    info.last_use_ns = tier.last_use(key);
    std::error_code ec;
    for (const auto& item : cache::fs::directory_iterator(tier.entry_dir(key), ec)) info.bytes += item.file_size(ec);
    std::string problem;
    auto entry = tier.load(key, nullptr, problem);
    if (!verify && !entry && problem.empty()) problem = "unreadable";
    info.problem = problem;
    if (entry) {
      const nlohmann::json manifest = nlohmann::json::parse(entry->manifest, nullptr, false);
      if (!manifest.is_discarded()) {
        info.spec = manifest.value("canonical", "");
        info.toolchain = manifest["toolchain"].value("identity", "");
      }
    }
    entries.push_back(std::move(info));
  }
  return entries;
}

PruneResult prune_cache(const std::string& dir, uint64_t max_bytes) {
  cache::DiskTier tier(dir);
  PruneResult result;
  for (const CacheEntryInfo& entry : list_cache_entries(dir, true)) {
    if (entry.problem.empty()) continue;
    tier.quarantine(entry.key);
    result.quarantined++;
  }
  result.staging_removed = tier.remove_dead_staging();
  result.evicted = tier.enforce_size(max_bytes, "");
  result.bytes_after = tier.entries_bytes();
  return result;
}

bool remove_cache_entry(const std::string& dir, const std::string& key) {
  cache::DiskTier tier(dir);
  std::error_code ec;
  if (!cache::fs::is_directory(tier.entry_dir(key), ec)) return false;
  tier.quarantine(key);
  return true;
}

}  // namespace epjit
