#include "disk_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include <nlohmann/json.hpp>

#include "../core/sha256.h"
#include "epjit/error.h"
#include "epjit/logging.h"

namespace epjit::cache {
namespace {

// Reads a file that must be a regular file (not a link) owned as `owners`
// says and writable by nobody else; `problem` says why not.
std::vector<uint8_t> read_trusted(const fs::path& path, Ownership owners, std::string& problem) {
  problem.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    problem = errno == ELOOP ? path.filename().string() + " is a link" : path.filename().string() + " missing";
    return {};
  }
  if (std::string why = untrusted_file_reason(fd, path.string(), owners); !why.empty()) {
    ::close(fd);
    problem = why;
    return {};
  }
  std::vector<uint8_t> bytes;
  uint8_t chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = path.filename().string() + " cannot be read";
      bytes.clear();
      break;
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  ::close(fd);
  return bytes;
}

std::string read_trusted_text(const fs::path& path, Ownership owners, std::string& problem) {
  std::vector<uint8_t> bytes = read_trusted(path, owners, problem);
  return {bytes.begin(), bytes.end()};
}

// A directory (not a link) owned as `owners` says and writable by nobody else.
std::string untrusted_layout_reason(const fs::path& path, Ownership owners) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) return path.string() + " does not exist";
  if (S_ISLNK(status.st_mode)) return path.string() + " is a link: remove it (epjit creates this directory itself)";
  return untrusted_directory_reason(path.string(), owners);
}

// Writes a file and fsyncs it.
bool write_synced(const fs::path& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  const auto* bytes = static_cast<const char*>(data);
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return false;
    }
    written += size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  return ::close(fd) == 0 && synced;
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::to_string(getpid()) + "." + std::to_string(counter++) + "." + std::to_string(now_ns() % 1000000007);
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string file_sha256(const std::vector<uint8_t>& bytes) { return Sha256().update(bytes.data(), bytes.size()).hex(); }

bool is_key(std::string_view text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void require_key(std::string_view text, const std::string& what) {
  if (!is_key(text))
    throw Error(what + ": '" + std::string(text.substr(0, 80)) + "' is not a cache key",
                "64 lowercase hex digits (epjit-cache ls shows the keys)", "pass a key as epjit-cache ls prints it");
}

std::string json_string(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return {};
  const auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

std::optional<uint64_t> json_unsigned(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return std::nullopt;
  const auto found = object.find(name);
  if (found == object.end() || !found->is_number_unsigned()) return std::nullopt;
  return found->get<uint64_t>();
}

fs::path DiskTier::lock_path(const std::string& key) const {
  require_key(key, "a cache lock");
  return root_ / "locks" / (key + ".lock");
}

fs::path DiskTier::entry_dir(const std::string& key) const {
  require_key(key, "a cache entry");
  return root_ / "entries" / key;
}

std::string DiskTier::untrusted_reason() const {
  if (std::string why = untrusted_directory_reason(root_.string(), owners_); !why.empty()) return why;
  for (const char* sub : {"entries", "sources", "staging", "quarantine", "locks"}) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(root_ / sub, ec))) continue;
    if (std::string why = untrusted_layout_reason(root_ / sub, owners_); !why.empty()) return why;
  }
  return {};
}

bool DiskTier::prepare() {
  // Private to this user from the start: a cache holds code this process runs.
  if (::mkdir(root_.c_str(), 0700) != 0 && errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(root_.parent_path(), ec);
    ::mkdir(root_.c_str(), 0700);
  }
  if (std::string why = untrusted_directory_reason(root_.string(), owners_); !why.empty()) {
    if (!fs::exists(root_)) return false;
    throw Error("the kernel cache " + why, "a directory only this user can write into",
                "fix it as the message says, or set EPJIT_CACHE_DIR to a directory of your own");
  }
  if (::access(root_.c_str(), W_OK) != 0) return false;
  for (const char* sub : {"entries", "sources", "staging", "quarantine", "locks"}) {
    if (::mkdir((root_ / sub).c_str(), 0700) != 0 && errno != EEXIST) return false;
    if (std::string why = untrusted_layout_reason(root_ / sub, owners_); !why.empty())
      throw Error("the kernel cache " + why, "a directory only this user can write into",
                  "fix it as the message says, or set EPJIT_CACHE_DIR to a directory of your own");
  }
  return ::access((root_ / "entries").c_str(), W_OK) == 0;
}

std::optional<LoadedEntry> DiskTier::load(const std::string& key, const Expectation* expect,
                                          std::string& problem) const {
  problem.clear();
  const fs::path dir = entry_dir(key);
  struct stat status {};
  if (::lstat(dir.c_str(), &status) != 0) return std::nullopt;
  if (std::string why = untrusted_layout_reason(dir, owners_); !why.empty()) return problem = why, std::nullopt;
  LoadedEntry entry;
  entry.manifest = read_trusted_text(dir / "manifest.json", owners_, problem);
  if (!problem.empty()) return std::nullopt;
  nlohmann::json manifest = nlohmann::json::parse(entry.manifest, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) return problem = "manifest.json does not parse", std::nullopt;
  const auto format = json_unsigned(manifest, "format");
  if (!format || *format != uint64_t(kManifestFormat))
    return problem = "manifest format " + (manifest.contains("format") ? manifest["format"].dump() : "(none)") +
                     " is not " + std::to_string(kManifestFormat) +
                     " (an entry without an interface record, from an older epjit)",
           std::nullopt;
  if (json_string(manifest, "key") != key) return problem = "manifest names another key", std::nullopt;
  const std::string toolchain =
      manifest.contains("toolchain") ? json_string(manifest["toolchain"], "identity") : std::string();
  if (toolchain.empty()) return problem = "manifest names no toolchain", std::nullopt;
  if (expect) {
    if (toolchain != expect->toolchain_identity) return problem = "built by another toolchain", std::nullopt;
    if (json_string(manifest, "epjit_version") != expect->epjit_version)
      return problem = "built by another epjit version", std::nullopt;
  }
  const nlohmann::json artifact = manifest.contains("artifact") ? manifest["artifact"] : nlohmann::json();
  entry.artifact_digest = json_string(artifact, "sha256");
  const auto bytes = json_unsigned(artifact, "bytes");
  if (!is_key(entry.artifact_digest) || !bytes || *bytes == 0)
    return problem = "manifest has no valid artifact digest and size", std::nullopt;
  entry.binary = read_trusted(dir / (entry.artifact_digest + ".bin"), owners_, problem);
  if (!problem.empty()) return problem = "artifact: " + problem, std::nullopt;
  if (entry.binary.size() != *bytes)
    return problem = "artifact size differs from its manifest (truncated?)", std::nullopt;
  if (file_sha256(entry.binary) != entry.artifact_digest)
    return problem = "artifact checksum mismatch (corrupted)", std::nullopt;
  const auto record = manifest.find("interface");
  if (record == manifest.end() || !record->is_object())
    return problem = "manifest has no interface record", std::nullopt;
  try {
    entry.interface =
        std::make_shared<const ModuleInterface>(ModuleInterface::parse(record->dump(2), "cache entry " + key));
  } catch (const Error& error) {
    return problem = error.problem(), std::nullopt;
  }
  return entry;
}

bool DiskTier::publish(const std::string& key, const std::string& manifest, const std::vector<uint8_t>& binary,
                       const std::string& artifact_digest, const std::function<void(PublishPoint)>& hook) const {
  require_key(key, "publishing a cache entry");
  require_key(artifact_digest, "publishing a cache entry's artifact");
  if (binary.empty())
    throw Error("the toolchain produced an empty artifact for cache entry " + key, "a compiled binary",
                "look at the toolchain's log; nothing was published");
  const fs::path staging = root_ / "staging" / (key + "." + unique_suffix());
  std::error_code ec;
  fs::create_directories(staging, ec);
  const auto fail = [&](const std::string& what) {
    fs::remove_all(staging, ec);
    throw Error("cannot publish cache entry " + key + " under " + root_.string() + ": " + what,
                "a writable cache directory with free space", "free space, or set EPJIT_CACHE_DIR elsewhere");
  };
  if (ec) fail(ec.message());
  if (!write_synced(staging / (artifact_digest + ".bin"), binary.data(), binary.size())) fail("writing the artifact");
  if (hook) hook(PublishPoint::ArtifactWritten);
  if (!write_synced(staging / "manifest.json", manifest.data(), manifest.size())) fail("writing the manifest");
  if (hook) hook(PublishPoint::ManifestWritten);
  const std::string stamp = std::to_string(now_ns());
  if (!write_synced(staging / "last_use", stamp.data(), stamp.size())) fail("writing last_use");
  sync_directory(staging);
  if (hook) hook(PublishPoint::BeforeRename);
  // rename(2) replaces an empty directory: publish only when nothing is there.
  struct stat existing {};
  if (::lstat(entry_dir(key).c_str(), &existing) == 0 || ::rename(staging.c_str(), entry_dir(key).c_str()) != 0) {
    fs::remove_all(staging, ec);  // another process published the same key first
    return false;
  }
  sync_directory(root_ / "entries");
  return true;
}

void DiskTier::touch(const std::string& key) const {
  require_key(key, "a cache entry");
  const fs::path temp = entry_dir(key) / ("last_use." + unique_suffix());
  const std::string stamp = std::to_string(now_ns());
  std::error_code ec;
  if (!write_synced(temp, stamp.data(), stamp.size())) return;
  fs::rename(temp, entry_dir(key) / "last_use", ec);
  if (ec) fs::remove(temp, ec);
}

int64_t DiskTier::last_use(const std::string& key) const {
  std::string problem;
  const std::string text = read_trusted_text(entry_dir(key) / "last_use", owners_, problem);
  if (!problem.empty() || text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return std::stoll(text);
}

std::string DiskTier::quarantine(const std::string& key) const {
  const fs::path target = root_ / "quarantine" / (key + "." + unique_suffix());
  // Renamed within the cache, never deleted in place: a rename cannot reach
  // outside it (the key is checked), a recursive delete could follow a link.
  if (::rename(entry_dir(key).c_str(), target.c_str()) != 0) {
    log().warn("cannot move cache entry {} to the quarantine: {}", key, std::strerror(errno));
    return entry_dir(key).string() + " (left in place)";
  }
  return target.string();
}

void DiskTier::quarantine_source(const std::string& source_key) const {
  require_key(source_key, "a stored source");
  const std::string stamp = unique_suffix();
  for (const char* suffix : {".src", ".interface.json", ".sha256"}) {
    const fs::path from = root_ / "sources" / (source_key + suffix);
    const fs::path to = root_ / "quarantine" / (source_key + suffix + "." + stamp);
    ::rename(from.c_str(), to.c_str());
  }
}

namespace {
// What a stored source's digest covers: the source and its interface record.
std::string source_digest(const GeneratedSource& generated) {
  return Sha256().update(generated.source).update("\0", 1).update(generated.interface).hex();
}
}  // namespace

std::optional<GeneratedSource> DiskTier::load_source(const std::string& source_key) const {
  require_key(source_key, "a stored source");
  std::string problem;
  GeneratedSource generated;
  const fs::path base = root_ / "sources" / source_key;
  generated.source = read_trusted_text(base.string() + ".src", owners_, problem);
  if (!problem.empty()) return std::nullopt;
  generated.interface = read_trusted_text(base.string() + ".interface.json", owners_, problem);
  if (!problem.empty()) return std::nullopt;
  const std::string recorded = read_trusted_text(base.string() + ".sha256", owners_, problem);
  if (!problem.empty() || recorded != source_digest(generated)) {
    log().warn("the stored source {} in {} does not match its digest; regenerating it", source_key, root_.string());
    if (owners_ == Ownership::CurrentUser) quarantine_source(source_key);
    return std::nullopt;
  }
  return generated;
}

void DiskTier::store_source(const std::string& source_key, const GeneratedSource& generated) const {
  require_key(source_key, "a stored source");
  // The interface and the source first, the digest that vouches for both last.
  const std::string digest = source_digest(generated);
  using Part = std::pair<const char*, const std::string*>;
  for (const auto& [suffix, text] : {Part{".interface.json", &generated.interface}, Part{".src", &generated.source},
                                     Part{".sha256", &digest}}) {
    const fs::path temp = root_ / "sources" / (source_key + suffix + "." + unique_suffix());
    if (!write_synced(temp, text->data(), text->size())) return;  // sources are an optimization
    std::error_code ec;
    fs::rename(temp, root_ / "sources" / (source_key + suffix), ec);
    if (ec) {
      fs::remove(temp, ec);
      return;
    }
  }
}

size_t DiskTier::remove_dead_staging() const {
  size_t removed = 0;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(root_ / "staging", ec)) {
    // <key>.<pid>.<n>.<t>: the writer's pid is the second field.
    const std::string name = item.path().filename().string();
    const size_t first = name.find('.');
    const size_t second = name.find('.', first + 1);
    if (first == std::string::npos || second == std::string::npos || !is_key(name.substr(0, first))) continue;
    const pid_t pid = pid_t(std::strtol(name.substr(first + 1, second - first - 1).c_str(), nullptr, 10));
    if (pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH)) continue;  // still alive
    fs::remove_all(item.path(), ec);
    ++removed;
  }
  return removed;
}

std::vector<std::string> DiskTier::keys() const {
  std::vector<std::string> keys;
  std::error_code ec;
  // Real directories named by keys only: a link or a stray name is not an entry.
  for (const auto& item : fs::directory_iterator(root_ / "entries", ec)) {
    const std::string name = item.path().filename().string();
    if (is_key(name) && fs::is_directory(item.symlink_status(ec))) keys.push_back(name);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

uint64_t DiskTier::entries_bytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& item : fs::recursive_directory_iterator(root_ / "entries", ec))
    if (fs::is_regular_file(item.symlink_status(ec))) total += item.file_size(ec);
  return total;
}

size_t DiskTier::enforce_size(uint64_t max_bytes, const std::string& keep) const {
  if (max_bytes == 0) return 0;
  uint64_t total = entries_bytes();
  if (total <= max_bytes) return 0;
  std::vector<std::pair<int64_t, std::string>> by_use;
  for (const std::string& key : keys())
    if (key != keep) by_use.emplace_back(last_use(key), key);
  std::sort(by_use.begin(), by_use.end());
  size_t evicted = 0;
  std::error_code ec;
  for (const auto& [used, key] : by_use) {
    if (total <= max_bytes) break;
    uint64_t bytes = 0;
    for (const auto& item : fs::directory_iterator(entry_dir(key), ec))
      if (fs::is_regular_file(item.symlink_status(ec))) bytes += item.file_size(ec);
    // Rename first so a reader never sees a half-removed entry.
    const fs::path doomed = root_ / "staging" / (key + "." + unique_suffix() + ".evicted");
    fs::rename(entry_dir(key), doomed, ec);
    if (ec) continue;
    fs::remove_all(doomed, ec);
    total -= std::min(total, bytes);
    ++evicted;
  }
  return evicted;
}

KeyLock::KeyLock(const fs::path& path, double timeout_seconds, bool& waited, double& wait_seconds) {
  waited = false;
  wait_seconds = 0;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    throw Error("cannot open the cache lock " + path.string() + ": " + std::strerror(errno),
                "a writable cache directory", "fix its permissions or set EPJIT_CACHE_DIR elsewhere");
  }
  struct flock request = {};
  request.l_type = F_WRLCK;
  request.l_whence = SEEK_SET;
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(500);
  while (::fcntl(fd_, F_OFD_SETLK, &request) != 0) {
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
      const int error = errno;
      ::close(fd_);
      throw Error("cannot lock " + path.string() + ": " + std::strerror(error), "a filesystem with OFD locks",
                  "put EPJIT_CACHE_DIR on a local filesystem");
    }
    waited = true;
    wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (wait_seconds > timeout_seconds) {
      ::close(fd_);
      throw Error("waited " + std::to_string(int(wait_seconds)) + " s for another process compiling the same kernel (" +
                      path.filename().string() + ")",
                  "its compile to finish within EPJIT_CACHE_LOCK_TIMEOUT_S", "raise EPJIT_CACHE_LOCK_TIMEOUT_S, or look "
                  "for a hung process holding the lock");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases the OFD lock
}

}  // namespace epjit::cache
