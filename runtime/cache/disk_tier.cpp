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

namespace epjit::cache {
namespace {

std::vector<uint8_t> read_file(const fs::path& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = bool(in);
  if (!ok) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string read_text(const fs::path& path, bool& ok) {
  std::vector<uint8_t> bytes = read_file(path, ok);
  return {bytes.begin(), bytes.end()};
}

// Writes a file and fsyncs it.
bool write_synced(const fs::path& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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

bool DiskTier::prepare() {
  std::error_code ec;
  for (const char* sub : {"entries", "sources", "staging", "quarantine", "locks"}) {
    fs::create_directories(root_ / sub, ec);
    if (ec) return false;
  }
  return ::access(root_.c_str(), W_OK) == 0 && ::access((root_ / "entries").c_str(), W_OK) == 0;
}

std::optional<LoadedEntry> DiskTier::load(const std::string& key, const Expectation* expect,
                                          std::string& problem) const {
  problem.clear();
  const fs::path dir = entry_dir(key);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  bool ok = false;
  LoadedEntry entry;
  entry.manifest = read_text(dir / "manifest.json", ok);
  if (!ok) return problem = "manifest.json missing", std::nullopt;
  nlohmann::json manifest = nlohmann::json::parse(entry.manifest, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) return problem = "manifest.json does not parse", std::nullopt;
  const nlohmann::json& format = manifest["format"];
  if (!format.is_number_integer() || format.get<int64_t>() != kManifestFormat)
    return problem = "manifest format " + format.dump() + " is not " + std::to_string(kManifestFormat) +
                     " (an entry without an interface record, from an older epjit)",
           std::nullopt;
  if (manifest.value("key", "") != key) return problem = "manifest names another key", std::nullopt;
  if (expect) {
    if (manifest["toolchain"].value("identity", "") != expect->toolchain_identity)
      return problem = "built by another toolchain", std::nullopt;
    if (manifest.value("epjit_version", "") != expect->epjit_version)
      return problem = "built by another epjit version", std::nullopt;
  }
  const nlohmann::json& artifact = manifest["artifact"];
  entry.artifact_digest = artifact.value("sha256", "");
  if (entry.artifact_digest.size() != 64) return problem = "manifest has no artifact digest", std::nullopt;
  entry.binary = read_file(dir / (entry.artifact_digest + ".bin"), ok);
  if (!ok) return problem = "artifact file missing", std::nullopt;
  if (entry.binary.size() != artifact.value("bytes", uint64_t(0)))
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
  if (::rename(staging.c_str(), entry_dir(key).c_str()) != 0) {
    fs::remove_all(staging, ec);  // another process published the same key first
    return false;
  }
  sync_directory(root_ / "entries");
  return true;
}

void DiskTier::touch(const std::string& key) const {
  const fs::path temp = entry_dir(key) / ("last_use." + unique_suffix());
  const std::string stamp = std::to_string(now_ns());
  std::ofstream(temp) << stamp;
  std::error_code ec;
  fs::rename(temp, entry_dir(key) / "last_use", ec);
  if (ec) fs::remove(temp, ec);
}

int64_t DiskTier::last_use(const std::string& key) const {
  bool ok = false;
  const std::string text = read_text(entry_dir(key) / "last_use", ok);
  try {
    return ok ? std::stoll(text) : 0;
  } catch (...) {
    return 0;
  }
}

std::string DiskTier::quarantine(const std::string& key) const {
  const fs::path target = root_ / "quarantine" / (key + "." + unique_suffix());
  std::error_code ec;
  fs::rename(entry_dir(key), target, ec);
  if (ec) fs::remove_all(entry_dir(key), ec);
  return target.string();
}

std::optional<GeneratedSource> DiskTier::load_source(const std::string& source_key) const {
  bool source_ok = false, interface_ok = false;
  GeneratedSource generated;
  generated.source = read_text(root_ / "sources" / (source_key + ".src"), source_ok);
  generated.interface = read_text(root_ / "sources" / (source_key + ".interface.json"), interface_ok);
  if (!source_ok || !interface_ok) return std::nullopt;
  return generated;
}

void DiskTier::store_source(const std::string& source_key, const GeneratedSource& generated) const {
  // The interface first: a source is only used with its interface beside it.
  using Part = std::pair<const char*, const std::string*>;
  for (const auto& [suffix, text] : {Part{".interface.json", &generated.interface}, Part{".src", &generated.source}}) {
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
    if (first == std::string::npos || second == std::string::npos) continue;
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
  for (const auto& item : fs::directory_iterator(root_ / "entries", ec))
    if (item.is_directory()) keys.push_back(item.path().filename().string());
  std::sort(keys.begin(), keys.end());
  return keys;
}

uint64_t DiskTier::entries_bytes() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& item : fs::recursive_directory_iterator(root_ / "entries", ec))
    if (item.is_regular_file(ec)) total += item.file_size(ec);
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
    for (const auto& item : fs::directory_iterator(entry_dir(key), ec)) bytes += item.file_size(ec);
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
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
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
