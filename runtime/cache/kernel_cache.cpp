#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <future>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "../core/environment.h"
#include "../core/sha256.h"
#include "../source/embedded.h"
#include "bundle.h"
#include "disk_tier.h"
#include "epjit/cache.h"
#include "epjit/error.h"
#include "epjit/logging.h"
#include "epjit/targets/TargetInfo.h"
#include "epjit/toolchain.h"
#include "epjit/version.h"

namespace epjit {
namespace {

using cache::DiskTier;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// What makes two builds produce the same kernels: the version and a digest of
// the compiler's sources (templates and headers are digested per entry), not
// git metadata, so a copy built where the checkout has no .git (a GPU host)
// finds the entries a warmed bundle brought.
std::string build_identity() { return std::string(version()) + " (compiler " + std::string(compiler_digest()).substr(0, 16) + ")"; }

// The variables that change generated binaries: recorded in manifests and keys.
constexpr const char* kCodegenVariables[] = {"EPJIT_OPT_LEVEL"};

}  // namespace

CacheOptions CacheOptions::from_environment() {
  CacheOptions options;
  if (const char* dir = std::getenv("EPJIT_CACHE_DIR")) {
    options.dir = std::string(dir) == "off" ? "" : dir;
  } else if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    options.dir = xdg + "/epjit";
  } else if (const std::string home = env("HOME"); !home.empty()) {
    options.dir = home + "/.cache/epjit";
  }
  const std::string readonly = env("EPJIT_CACHE_READONLY");
  for (size_t start = 0; start <= readonly.size();) {
    const size_t end = readonly.find(':', start);
    const std::string dir = readonly.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) options.readonly_dirs.push_back(dir);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (const std::string max = env("EPJIT_CACHE_MAX_BYTES"); !max.empty())
    options.max_bytes = parse_byte_count(max, "EPJIT_CACHE_MAX_BYTES");
  options.lock_timeout_seconds =
      environment_seconds("EPJIT_CACHE_LOCK_TIMEOUT_S", options.lock_timeout_seconds, 0.001, 86400 * 7);
  if (const std::string level = env("EPJIT_OPT_LEVEL"); !level.empty()) {
    if (level.size() != 1 || level[0] < '0' || level[0] > '3')
      throw Error("EPJIT_OPT_LEVEL is '" + level + "'", "0, 1, 2 or 3", "fix or unset EPJIT_OPT_LEVEL (default 3)");
    options.opt_level = level[0] - '0';
  }
  return options;
}

class KernelCache::Impl {
 public:
  Impl(CacheOptions options, std::shared_ptr<KernelSource> source)
      : options_(std::move(options)), source_(std::move(source)) {
    check_log_level();
    if (!std::isfinite(options_.lock_timeout_seconds) || options_.lock_timeout_seconds <= 0)
      throw Error("CacheOptions.lock_timeout_seconds = " + std::to_string(options_.lock_timeout_seconds),
                  "a positive number of seconds", "set a positive timeout");
    if (!options_.dir.empty()) {
      DiskTier tier(options_.dir);
      if (tier.prepare()) {  // throws when the directory is not this user's to trust
        writable_.emplace(std::move(tier));
        writable_->remove_dead_staging();
      } else if (std::error_code ec; cache::fs::is_directory(options_.dir, ec) && tier.untrusted_reason().empty()) {
        // A cache this user can read but not write (a shared, pre-warmed one):
        // its entries serve as a read-only tier.
        log().info("'{}' is not writable: its kernels are used read-only, new ones are kept in memory", options_.dir);
        readonly_.emplace_back(options_.dir);
      } else {
        warn_memory_only("'" + options_.dir + "' is not writable");
      }
    } else {
      warn_memory_only("no cache directory is set");
    }
    // Read-only overlays may be root's (a system-wide warmed cache), never another user's.
    for (const std::string& dir : options_.readonly_dirs) {
      if (std::error_code ec; !cache::fs::exists(dir, ec)) continue;  // an overlay not mounted here
      DiskTier tier(dir, Ownership::CurrentUserOrRoot);
      if (std::string why = tier.untrusted_reason(); !why.empty())
        throw Error("the read-only kernel cache " + why, "a directory owned by this user or root, writable by no one else",
                    "fix it as the message says, or remove it from EPJIT_CACHE_READONLY");
      readonly_.push_back(std::move(tier));
    }
  }

  struct Material {
    std::string key, source_key, template_digest;
    const TargetInfo* target = nullptr;
    const Toolchain* toolchain = nullptr;
    std::vector<std::string> options;
  };

  Material material(const KernelSpec& spec) {
    Material m;
    m.target = find_target(spec.target);
    if (!m.target) {
      throw Error("unknown target '" + spec.target + "' for " + spec.template_name, "one of " + target_names(),
                  "pass a known target (or set EPJIT_TARGET)");
    }
    m.template_digest = template_digest(spec.template_name);
    if (m.template_digest.empty()) {
      std::string names;
      for (const EmbeddedFile& file : embedded_templates()) names += (names.empty() ? "" : ", ") + std::string(file.name);
      throw Error("unknown template '" + spec.template_name + "'", "one of " + names, "use a template epjit ships");
    }
    m.toolchain = &toolchain_for(*m.target);
    m.options = m.toolchain->options(request_for(spec, *m.target, ""));
    Sha256 source_hash;
    source_hash.update("epjit-source-v2\n").update(build_identity()).update("\n").update(spec.canonical()).update("\n");
    source_hash.update(m.template_digest);
    m.source_key = source_hash.hex();
    Sha256 key_hash;
    key_hash.update("epjit-kernel-v2\n").update(m.source_key).update("\n").update(headers_digest()).update("\n");
    key_hash.update(compiler_digest()).update("\n");
    key_hash.update(m.target->arch).update("\n").update(m.toolchain->name()).update("\n");
    key_hash.update(m.toolchain->identity()).update("\n");
    for (const std::string& option : m.options) key_hash.update(option).update("\n");
    for (const auto& [name, value] : codegen_environment()) key_hash.update(name).update("=").update(value).update("\n");
    m.key = key_hash.hex();
    return m;
  }

  std::map<std::string, std::string> codegen_environment() const {
    std::map<std::string, std::string> values;
    for (const char* name : kCodegenVariables) values[name] = env(name);
    values["EPJIT_OPT_LEVEL"] = std::to_string(options_.opt_level);
    return values;
  }

  CompileRequest request_for(const KernelSpec& spec, const TargetInfo& target, std::string source) const {
    CompileRequest request;
    request.source = std::move(source);
    request.name = spec.template_name + std::string(target.source_extension());
    request.target = &target;
    request.opt_level = options_.opt_level;
    return request;
  }

  const Toolchain& toolchain_for(const TargetInfo& target) {
    std::lock_guard lock(toolchain_mutex_);
    auto& slot = toolchains_[std::string(target.name)];
    if (!slot) slot = default_toolchain(target);
    return *slot;
  }

  std::shared_ptr<const KernelArtifact> get(const KernelSpec& spec) {
    const std::string canonical = spec.canonical();
    {
      std::shared_lock lock(memory_mutex_);
      if (auto it = memory_.find(canonical); it != memory_.end()) {
        memory_hits_.fetch_add(1, std::memory_order_relaxed);
        return it->second;
      }
    }
    // One fetch per key in this process: the threads that ask while it runs
    // (ranks as threads building their ops at once) wait for it, rather
    // than each compiling (the disk tier's lock orders processes, and a
    // memory-only cache has none).
    std::promise<std::shared_ptr<const KernelArtifact>> fetched;
    std::shared_future<std::shared_ptr<const KernelArtifact>> pending;
    {
      std::lock_guard lock(flight_mutex_);
      auto [it, first] = in_flight_.try_emplace(canonical);
      if (first) it->second = fetched.get_future().share();
      else pending = it->second;
    }
    if (pending.valid()) {
      std::shared_ptr<const KernelArtifact> artifact = pending.get();  // rethrows the fetch's error
      memory_hits_.fetch_add(1, std::memory_order_relaxed);
      return artifact;
    }
    struct Land {
      Impl& impl;
      const std::string& canonical;
      ~Land() {
        std::lock_guard lock(impl.flight_mutex_);
        impl.in_flight_.erase(canonical);
      }
    } land{*this, canonical};
    try {
      const Material m = material(spec);
      const cache::Expectation expect{m.key, m.toolchain->identity(), build_identity()};
      std::shared_ptr<const KernelArtifact> artifact = load_from_disk(spec, m, expect);
      if (!artifact) {
        misses_++;
        artifact = writable_ ? compile_single_flight(spec, m, expect) : compile(spec, m);
      }
      std::unique_lock lock(memory_mutex_);
      artifact = memory_.try_emplace(canonical, std::move(artifact)).first->second;
      fetched.set_value(artifact);
      return artifact;
    } catch (...) {
      fetched.set_exception(std::current_exception());
      throw;
    }
  }

  std::shared_ptr<const KernelArtifact> load_from_disk(const KernelSpec& spec, const Material& m,
                                                       const cache::Expectation& expect) {
    std::string problem;
    if (writable_) {
      if (auto entry = writable_->load(m.key, &expect, problem)) {
        disk_hits_++;
        writable_->touch(m.key);
        return make_artifact(spec, m.key, std::move(*entry));
      }
      if (!problem.empty()) {
        const std::string where = writable_->quarantine(m.key);
        quarantined_++;
        log().warn("cache entry {} ({}) is bad: {}; quarantined to {} and rebuilding", m.key, spec.canonical(), problem,
                   where);
      }
    }
    for (const DiskTier& tier : readonly_) {
      if (auto entry = tier.load(m.key, &expect, problem)) {
        readonly_hits_++;
        return make_artifact(spec, m.key, std::move(*entry));
      }
      if (!problem.empty())
        log().warn("skipping bad read-only cache entry {} in {}: {}", m.key, tier.root().string(), problem);
    }
    return nullptr;
  }

  std::shared_ptr<const KernelArtifact> compile_single_flight(const KernelSpec& spec, const Material& m,
                                                              const cache::Expectation& expect) {
    bool waited = false;
    double waited_seconds = 0;
    cache::KeyLock lock(writable_->lock_path(m.key), options_.lock_timeout_seconds, waited, waited_seconds);
    if (waited) {
      lock_waits_++;
      lock_wait_seconds_.fetch_add(waited_seconds);
    }
    // Another process may have published between our miss and the lock, with or without a wait.
    std::string problem;
    if (auto entry = writable_->load(m.key, &expect, problem)) {
      writable_->touch(m.key);
      return make_artifact(spec, m.key, std::move(*entry));
    }
    return compile(spec, m);
  }

  std::shared_ptr<const KernelArtifact> compile(const KernelSpec& spec, const Material& m) {
    auto [generated, interface, from] = source_for(spec, m, /*generate=*/false);
    CompiledBinary binary;
    try {
      binary = m.toolchain->compile(request_for(spec, *m.target, generated.source));
    } catch (const Error& error) {
      if (!from) throw;
      // A stored source that does not compile is set aside and generated anew:
      // one bad file must not fail every later run.
      log().warn("the stored source of {} in {} did not compile ({}); regenerating it", spec.canonical(),
                 from->root().string(), error.problem());
      if (from == &*writable_) from->drop_source(m.source_key);
      std::tie(generated, interface, from) = source_for(spec, m, /*generate=*/true);
      binary = m.toolchain->compile(request_for(spec, *m.target, generated.source));
    }
    compiles_++;
    compile_seconds_.fetch_add(binary.seconds);
    cache::LoadedEntry entry;
    entry.artifact_digest = cache::file_sha256(binary.bytes);
    entry.manifest = manifest_for(spec, m, generated, entry.artifact_digest, binary).dump(2);
    entry.interface = std::move(interface);
    entry.binary = std::move(binary.bytes);
    if (writable_) {
      writable_->publish(m.key, entry.manifest, entry.binary, entry.artifact_digest, hook_);
      evictions_ += writable_->enforce_size(options_.max_bytes, m.key);
    }
    log().info("compiled {} with {} in {:.3f} s", spec.canonical(), m.toolchain->identity(), binary.seconds);
    return make_artifact(spec, m.key, std::move(entry));
  }

  // The generated source, its parsed interface, and the tier it came from:
  // a tier's when a source stored there matches its digest and carries a
  // valid interface record (unless `generate`), else the compiler's (null tier).
  std::tuple<GeneratedSource, std::shared_ptr<const ModuleInterface>, const DiskTier*> source_for(
      const KernelSpec& spec, const Material& m, bool generate) {
    std::vector<const DiskTier*> tiers;
    if (writable_ && !generate) tiers.push_back(&*writable_);
    for (const DiskTier& tier : readonly_)
      if (!generate) tiers.push_back(&tier);
    for (const DiskTier* tier : tiers) {
      std::optional<GeneratedSource> stored = tier->load_source(m.source_key);
      if (!stored) continue;
      try {
        auto interface = std::make_shared<const ModuleInterface>(
            ModuleInterface::parse(stored->interface, "the stored source of " + spec.canonical()));
        return {std::move(*stored), std::move(interface), tier};
      } catch (const Error& error) {
        log().warn("ignoring the stored source of {} in {}: {}", spec.canonical(), tier->root().string(),
                   error.problem());
      }
    }
    GeneratedSource generated = kernel_source(spec).generate(spec);
    sources_generated_++;
    // A record this runtime cannot read is the compiler's fault, never cached.
    auto interface = std::make_shared<const ModuleInterface>(
        ModuleInterface::parse(generated.interface, "the compiler's output for " + spec.canonical()));
    if (writable_) writable_->store_source(m.source_key, generated);
    return {std::move(generated), std::move(interface), nullptr};
  }

  const KernelSource& kernel_source(const KernelSpec& spec) {
    std::lock_guard lock(source_mutex_);
    if (!source_) {
      std::string why;
      source_ = load_compiler_source(&why);
      if (!source_) {
        throw Error(spec.canonical() + " is not in the kernel cache and no compiler is available (" + why + ")",
                    "a cache warmed for this specialization, or the epjit compiler",
                    "import a bundle made by `epjit-warm --export` (epjit-warm --import FILE), or install epjit "
                    "with its compiler");
      }
    }
    return *source_;
  }

  nlohmann::json manifest_for(const KernelSpec& spec, const Material& m, const GeneratedSource& generated,
                              const std::string& digest, const CompiledBinary& binary) const {
    nlohmann::json manifest;
    manifest["format"] = cache::kManifestFormat;
    manifest["key"] = m.key;
    manifest["spec"] = {{"template", spec.template_name}, {"params", spec.params}, {"target", spec.target}};
    manifest["canonical"] = spec.canonical();
    manifest["template_digest"] = m.template_digest;
    manifest["headers_digest"] = headers_digest();
    manifest["compiler_digest"] = std::string(compiler_digest());
    manifest["source_key"] = m.source_key;
    manifest["source_digest"] = sha256_hex(generated.source);
    manifest["interface"] = nlohmann::json::parse(generated.interface);
    manifest["arch"] = std::string(m.target->arch);
    manifest["toolchain"] = {{"name", std::string(m.toolchain->name())}, {"identity", m.toolchain->identity()}};
    manifest["options"] = m.options;
    manifest["epjit_version"] = build_identity();
    manifest["epjit_revision"] = std::string(git_revision());
    manifest["environment"] = codegen_environment();
    manifest["artifact"] = {{"sha256", digest}, {"bytes", binary.bytes.size()}};
    manifest["compile_seconds"] = binary.seconds;
    manifest["created_unix_ns"] = cache::now_ns();
    return manifest;
  }

  static std::shared_ptr<const KernelArtifact> make_artifact(const KernelSpec& spec, const std::string& key,
                                                             cache::LoadedEntry entry) {
    auto artifact = std::make_shared<KernelArtifact>();
    artifact->key = key;
    artifact->spec = spec;
    artifact->binary = std::move(entry.binary);
    artifact->artifact_digest = std::move(entry.artifact_digest);
    artifact->manifest = std::move(entry.manifest);
    artifact->interface = std::move(entry.interface);
    return artifact;
  }

  static void warn_memory_only(const std::string& why) {
    static std::once_flag once;
    std::call_once(once, [&] {
      log().warn("{}: kernels are cached in memory only (set EPJIT_CACHE_DIR to a writable directory to keep them)",
                 why);
    });
  }

  CacheStats stats() const {
    CacheStats s;
    s.memory_hits = memory_hits_.load();
    s.disk_hits = disk_hits_.load();
    s.readonly_hits = readonly_hits_.load();
    s.misses = misses_.load();
    s.compiles = compiles_.load();
    s.sources_generated = sources_generated_.load();
    s.lock_waits = lock_waits_.load();
    s.quarantined = quarantined_.load();
    s.evictions = evictions_.load();
    s.compile_seconds = compile_seconds_.load();
    s.lock_wait_seconds = lock_wait_seconds_.load();
    return s;
  }

  CacheOptions options_;
  std::optional<DiskTier> writable_;
  std::vector<DiskTier> readonly_;
  std::function<void(PublishPoint)> hook_;

 private:
  std::shared_ptr<KernelSource> source_;
  std::mutex source_mutex_;
  std::mutex toolchain_mutex_;
  std::map<std::string, std::unique_ptr<Toolchain>> toolchains_;
  std::shared_mutex memory_mutex_;
  std::mutex flight_mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const KernelArtifact>>> in_flight_;
  std::unordered_map<std::string, std::shared_ptr<const KernelArtifact>> memory_;
  std::atomic<uint64_t> memory_hits_{0}, disk_hits_{0}, readonly_hits_{0}, misses_{0}, compiles_{0},
      sources_generated_{0}, lock_waits_{0}, quarantined_{0}, evictions_{0};
  std::atomic<double> compile_seconds_{0}, lock_wait_seconds_{0};
};

KernelCache::KernelCache(CacheOptions options, std::shared_ptr<KernelSource> source)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(source))) {}
KernelCache::~KernelCache() = default;

std::shared_ptr<const KernelArtifact> KernelCache::get(const KernelSpec& spec) { return impl_->get(spec); }
std::string KernelCache::key(const KernelSpec& spec) { return impl_->material(spec).key; }
CacheStats KernelCache::stats() const { return impl_->stats(); }
const CacheOptions& KernelCache::options() const { return impl_->options_; }
bool KernelCache::memory_only() const { return !impl_->writable_; }
size_t KernelCache::export_bundle(const std::string& path) {
  if (!impl_->writable_) {
    throw Error("there is no writable cache directory to export", "EPJIT_CACHE_DIR or --cache-dir set to a cache",
                "point epjit-warm at the cache to export with --cache-dir");
  }
  return cache::export_entries(*impl_->writable_, path);
}

KernelCache::ImportResult KernelCache::import_bundle(const std::string& path) {
  if (!impl_->writable_) {
    throw Error("there is no writable cache directory to import into", "a writable EPJIT_CACHE_DIR or --cache-dir",
                "set EPJIT_CACHE_DIR (or --cache-dir) to a writable directory");
  }
  return cache::import_entries(*impl_->writable_, path);
}

void KernelCache::set_publish_hook(std::function<void(PublishPoint)> hook) { impl_->hook_ = std::move(hook); }

}  // namespace epjit
