// One cache directory on disk:
//   entries/<key>/manifest.json, entries/<key>/<sha256>.bin, entries/<key>/last_use
//   sources/<source-key>.src     generated source, reusable by any toolchain,
//   sources/<source-key>.interface.json   and the module's interface record
//   staging/<key>.<pid>.<n>/     an entry being written (renamed into entries/)
//   quarantine/<key>.<time>.<pid>/  entries that failed verification
//   locks/<key>.lock             per-key OFD locks (single flight)
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "../core/trusted_path.h"
#include "epjit/cache.h"
#include "epjit/kernel_interface.h"
#include "epjit/kernel_source.h"

namespace epjit::cache {

// The manifest layout this runtime writes and reads: 2 carries the module's
// interface record ("interface"); entries of format 1 predate it and are rebuilt.
inline constexpr int kManifestFormat = 2;

namespace fs = std::filesystem;

// Keys (and source keys) are SHA-256 digests: 64 lowercase hex digits. Every
// path built from one is checked first, so no key can name a path outside
// the cache ("../..", "/", a link).
bool is_key(std::string_view text);
// Throws epjit::Error naming `what` (e.g. "epjit-cache rm") when `text` is not a key.
void require_key(std::string_view text, const std::string& what);

// Fields of a JSON object read without exceptions: empty / nullopt when the
// field is missing or of another type (a manifest is data from disk).
std::string json_string(const nlohmann::json& object, const char* name);
std::optional<uint64_t> json_unsigned(const nlohmann::json& object, const char* name);

// What a valid entry must say about itself (everything that produced it).
struct Expectation {
  std::string key;
  std::string toolchain_identity;
  std::string epjit_version;
};

struct LoadedEntry {
  std::vector<uint8_t> binary;
  std::string manifest;  // JSON text
  std::string artifact_digest;
  std::shared_ptr<const ModuleInterface> interface;  // from the manifest
};

class DiskTier {
 public:
  // `owners`: who may own the directory and what it holds (the current user
  // for a writable cache; root too for a read-only overlay).
  explicit DiskTier(fs::path root, Ownership owners = Ownership::CurrentUser)
      : root_(std::move(root)), owners_(owners) {}
  const fs::path& root() const { return root_; }

  // Creates the layout (private to this user: mode 0700); false when the
  // directory is not writable. Throws epjit::Error when the directory or one
  // of its parts is not this user's to trust (untrusted_reason).
  bool prepare();
  // Empty when the directory and its layout are owned as `owners` says,
  // writable by nobody else, and none of its parts is a link; else why not.
  std::string untrusted_reason() const;
  // The entry for `key`, verified; nullopt when absent. A present but bad
  // entry sets `problem` (and is not returned).
  std::optional<LoadedEntry> load(const std::string& key, const Expectation* expect, std::string& problem) const;
  // Stages, fsyncs and renames an entry into place; false when another
  // process published it first (which is fine).
  bool publish(const std::string& key, const std::string& manifest, const std::vector<uint8_t>& binary,
               const std::string& artifact_digest, const std::function<void(PublishPoint)>& hook) const;
  void touch(const std::string& key) const;
  // Moves a bad entry aside; returns where it went.
  std::string quarantine(const std::string& key) const;
  // A generated source with its interface record; nullopt unless both are
  // there and match the digest stored beside them (a mismatch is quarantined).
  std::optional<GeneratedSource> load_source(const std::string& source_key) const;
  // Moves a stored source aside (it failed to compile): the next use regenerates it.
  void drop_source(const std::string& source_key) const { quarantine_source(source_key); }
  void store_source(const std::string& source_key, const GeneratedSource& generated) const;
  // Removes staging directories whose writer process is gone.
  size_t remove_dead_staging() const;
  // Evicts least-recently-used entries until the entries take at most max_bytes
  // (never `keep`); returns the number evicted.
  size_t enforce_size(uint64_t max_bytes, const std::string& keep) const;
  uint64_t entries_bytes() const;
  std::vector<std::string> keys() const;
  int64_t last_use(const std::string& key) const;
  fs::path lock_path(const std::string& key) const;
  fs::path entry_dir(const std::string& key) const;

 private:
  void quarantine_source(const std::string& source_key) const;

  fs::path root_;
  Ownership owners_;
};

// An exclusive per-key OFD lock: held by an open file description, so it is
// released when its holder exits or is killed. Waiting is bounded.
class KeyLock {
 public:
  // Waits up to timeout_seconds; throws epjit::Error when it expires. `waited`
  // tells whether another process held it.
  KeyLock(const fs::path& path, double timeout_seconds, bool& waited, double& wait_seconds);
  ~KeyLock();
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;

 private:
  int fd_ = -1;
};

std::string file_sha256(const std::vector<uint8_t>& bytes);
int64_t now_ns();

}  // namespace epjit::cache
