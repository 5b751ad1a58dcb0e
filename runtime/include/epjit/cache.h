// The kernel cache: a dispatch key computed from the specialization alone
// maps to a verified, content-addressed artifact. Tiers: in-process memory,
// a writable directory, read-only overlays. Publishing is staged, fsynced and
// renamed; a bad entry is quarantined and rebuilt; one process compiles a
// missing key while the others wait for it (OFD locks, recovered when the
// holder dies); size is bounded by least-recent recorded use.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "epjit/kernel_interface.h"
#include "epjit/kernel_source.h"
#include "epjit/kernel_spec.h"

namespace epjit {

struct CacheOptions {
  std::string dir;                          // the writable tier; empty: memory only
  std::vector<std::string> readonly_dirs;   // searched after it, never written
  uint64_t max_bytes = 0;                   // bound on the writable tier; 0: none
  double lock_timeout_seconds = 600;        // how long to wait for another process's compile
  int opt_level = 3;                        // backend optimization level (codegen: in the key)

  // EPJIT_CACHE_DIR (default $XDG_CACHE_HOME/epjit, else ~/.cache/epjit; "" or
  // "off" for memory only), EPJIT_CACHE_READONLY (colon-separated),
  // EPJIT_CACHE_MAX_BYTES, EPJIT_CACHE_LOCK_TIMEOUT_S, EPJIT_OPT_LEVEL (0-3).
  // Throws epjit::Error on a malformed value.
  static CacheOptions from_environment();
};

struct CacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;       // writable tier
  uint64_t readonly_hits = 0;
  uint64_t misses = 0;          // not in any tier: compiled here or by another process
  uint64_t compiles = 0;        // compiles this process ran
  uint64_t sources_generated = 0;
  uint64_t lock_waits = 0;      // times another process held a key's lock
  uint64_t quarantined = 0;
  uint64_t evictions = 0;
  double compile_seconds = 0;
  double lock_wait_seconds = 0;
};

struct KernelArtifact {
  std::string key;            // the dispatch key (SHA-256 hex)
  KernelSpec spec;
  std::vector<uint8_t> binary;
  std::string artifact_digest;
  std::string manifest;       // the manifest, as JSON text
  std::shared_ptr<const ModuleInterface> interface;  // what the module's kernels take (KernelModule binds by it)
};

// Points inside publishing, for tests that kill a writer there.
enum class PublishPoint { ArtifactWritten, ManifestWritten, BeforeRename };

class KernelCache {
 public:
  // `source` generates source on a miss; null: load the compiler provider when
  // first needed (an error then says what is missing).
  explicit KernelCache(CacheOptions options = CacheOptions::from_environment(),
                       std::shared_ptr<KernelSource> source = nullptr);
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The artifact for a specialization: memory, disk, read-only overlays, else
  // generate and compile (one process per key). Throws epjit::Error.
  std::shared_ptr<const KernelArtifact> get(const KernelSpec& spec);
  // The dispatch key of a specialization (no source is generated).
  std::string key(const KernelSpec& spec);

  CacheStats stats() const;
  const CacheOptions& options() const;
  bool memory_only() const;

  // Writes every valid entry of the writable tier (and its source) into one
  // bundle file; returns the number of entries. Throws epjit::Error.
  size_t export_bundle(const std::string& path);
  struct ImportResult {
    size_t imported = 0, already_present = 0, rejected = 0;
    std::vector<std::string> problems;
  };
  // Verifies every entry of a bundle (manifest, key, checksums) and installs
  // the good ones into the writable tier.
  ImportResult import_bundle(const std::string& path);

  // Test hook: called at each point of publishing.
  void set_publish_hook(std::function<void(PublishPoint)> hook);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Maintenance of a cache directory (epjit-cache).
struct CacheEntryInfo {
  std::string key;
  std::string spec;        // canonical specialization
  std::string toolchain;
  uint64_t bytes = 0;
  int64_t last_use_ns = 0;
  std::string problem;     // empty when the entry verifies
};
std::vector<CacheEntryInfo> list_cache_entries(const std::string& dir, bool verify);
// Removes entries whose problem is not empty (moved to quarantine/), stale
// staging directories, and evicts least-recently-used entries above max_bytes.
struct PruneResult {
  size_t quarantined = 0, staging_removed = 0, evicted = 0;
  uint64_t bytes_after = 0;
};
PruneResult prune_cache(const std::string& dir, uint64_t max_bytes);
bool remove_cache_entry(const std::string& dir, const std::string& key);

}  // namespace epjit
