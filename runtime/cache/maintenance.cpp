// epjit-cache's operations on a cache directory.
#include <nlohmann/json.hpp>

#include "disk_tier.h"
#include "epjit/cache.h"
#include "epjit/error.h"

namespace epjit {

namespace {

// The tools act on a cache directory only when it is this user's: they
// delete and rename inside it.
cache::DiskTier trusted_tier(const std::string& dir) {
  cache::DiskTier tier(dir);
  std::error_code ec;
  if (!cache::fs::exists(cache::fs::symlink_status(dir, ec)))
    throw Error("the kernel cache " + dir + " does not exist", "an existing cache directory",
                "pass --cache-dir (or set EPJIT_CACHE_DIR) to a cache that epjit-warm or an op has filled");
  if (std::string why = tier.untrusted_reason(); !why.empty())
    throw Error("the kernel cache " + why, "a cache directory that only this user (or root) can write into",
                "remove write access for others (chmod go-w), or copy the entries you trust into a cache of your own "
                "with epjit-warm --export/--import");
  return tier;
}

}  // namespace

std::vector<CacheEntryInfo> list_cache_entries(const std::string& dir, bool verify) {
  cache::DiskTier tier = trusted_tier(dir);
  std::vector<CacheEntryInfo> entries;
  for (const std::string& key : tier.keys()) {
    CacheEntryInfo info;
    info.key = key;
    info.last_use_ns = tier.last_use(key);
    std::error_code ec;
    for (const auto& item : cache::fs::directory_iterator(tier.entry_dir(key), ec))
      if (cache::fs::is_regular_file(item.symlink_status(ec))) info.bytes += item.file_size(ec);
    std::string problem;
    auto entry = tier.load(key, nullptr, problem);
    if (!verify && !entry && problem.empty()) problem = "unreadable";
    info.problem = problem;
    if (entry) {
      const nlohmann::json manifest = nlohmann::json::parse(entry->manifest, nullptr, false);
      info.spec = cache::json_string(manifest, "canonical");
      if (manifest.is_object() && manifest.contains("toolchain"))
        info.toolchain = cache::json_string(manifest["toolchain"], "identity");
    }
    entries.push_back(std::move(info));
  }
  return entries;
}

PruneResult prune_cache(const std::string& dir, uint64_t max_bytes) {
  cache::DiskTier tier = trusted_tier(dir);
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
  cache::require_key(key, "epjit-cache rm");
  cache::DiskTier tier = trusted_tier(dir);
  std::error_code ec;
  if (!cache::fs::is_directory(cache::fs::symlink_status(tier.entry_dir(key), ec))) return false;
  tier.quarantine(key);
  return true;
}

}  // namespace epjit
