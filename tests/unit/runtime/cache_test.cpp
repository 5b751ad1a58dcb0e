// The kernel cache against real toolchains, real files and real processes:
// keys, tiers, corruption, killed writers, read-only and missing directories,
// the size bound, bundles, and 16 processes racing for the same kernels.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "../../common/child_process.h"
#include "../../common/scoped_environment.h"
#include "../../common/work_dir.h"
#include "cache_fixtures.h"
#include "epjit/cache.h"
#include "epjit/error.h"

namespace epjit {
namespace {

namespace fs = std::filesystem;

using testing::freshDir;


using testing::hostKernel;
using testing::inChild;
using testing::optionsFor;

using ScopedEnv = testing::ScopedEnvironment;


TEST(CacheKey, EveryKeyInputMissesAndTheSameRequestHits) {
  const std::string dir = freshDir("keys");
  KernelCache cache(optionsFor(dir));
  const std::string base = cache.key(hostKernel(256));
  EXPECT_EQ(cache.key(hostKernel(256)), base);
  EXPECT_NE(cache.key(hostKernel(257)), base) << "a parameter";
  EXPECT_NE(cache.key(hostKernel(256, "host-gfx950")), base) << "the target";
  EXPECT_NE(cache.key({"quantize_mxfp4", {{"hidden", "256"}}, "host"}), base) << "the template";
  {
    CacheOptions other = optionsFor(dir);
    other.opt_level = 2;  // what EPJIT_OPT_LEVEL sets
    EXPECT_NE(KernelCache(other).key(hostKernel(256)), base) << "a codegen option";
  }
  {
    ScopedEnv level("EPJIT_OPT_LEVEL", "2");
    CacheOptions from_env = CacheOptions::from_environment();
    from_env.dir = dir;
    EXPECT_NE(KernelCache(from_env).key(hostKernel(256)), base) << "EPJIT_OPT_LEVEL";
  }
  {
    ScopedEnv cxx("EPJIT_HOST_CXX", "clang++-22");
    EXPECT_NE(KernelCache(optionsFor(dir)).key(hostKernel(256)), base) << "the toolchain identity";
  }

  // Same request: the first compiles, the second (new process state) hits disk.
  auto first = cache.get(hostKernel(256));
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.get(hostKernel(256)), first);
  EXPECT_EQ(cache.stats().memory_hits, 1u);
  KernelCache again(optionsFor(dir));
  auto reloaded = again.get(hostKernel(256));
  EXPECT_EQ(again.stats().disk_hits, 1u);
  EXPECT_EQ(again.stats().compiles, 0u);
  EXPECT_EQ(reloaded->binary, first->binary);
  // A changed parameter misses on disk too.
  again.get(hostKernel(320));
  EXPECT_EQ(again.stats().compiles, 1u);
}

TEST(CacheKey, UnknownTemplatesAndTargetsAreErrors) {
  KernelCache cache(optionsFor(freshDir("unknown")));
  try {
    cache.get({"quantize_fp9", {}, "host"});
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("unknown template 'quantize_fp9'"), std::string::npos);
  }
  try {
    cache.get(hostKernel(64, "gfx90a"));
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("unknown target 'gfx90a'"), std::string::npos);
  }
}

TEST(CacheDisk, ManifestRecordsWhatProducedTheArtifact) {
  const std::string dir = freshDir("manifest");
  KernelCache cache(optionsFor(dir));
  auto artifact = cache.get(hostKernel(128, "host-gfx942"));
  for (const char* field : {"\"template_digest\"", "\"source_digest\"", "\"headers_digest\"", "\"toolchain\"",
                            "\"identity\"", "\"options\"", "\"epjit_version\"", "\"EPJIT_OPT_LEVEL\"", "\"arch\"",
                            "\"hidden\"", "\"host-gfx942\"", "\"sha256\""})
    EXPECT_NE(artifact->manifest.find(field), std::string::npos) << field << " missing from\n" << artifact->manifest;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "entries" / artifact->key / (artifact->artifact_digest + ".bin")));
}

// Flip one byte of the artifact, or truncate it: the next load notices,
// quarantines the entry, and rebuilds; `verify` reports it meanwhile.
TEST(CacheDisk, CorruptionIsDetectedQuarantinedAndRebuilt) {
  for (const bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "truncated" : "one byte flipped");
    const std::string dir = freshDir(truncate ? "truncated" : "flipped");
    std::shared_ptr<const KernelArtifact> good;
    {
      KernelCache cache(optionsFor(dir));
      good = cache.get(hostKernel(96));
    }
    const fs::path artifact = fs::path(dir) / "entries" / good->key / (good->artifact_digest + ".bin");
    if (truncate) {
      fs::resize_file(artifact, fs::file_size(artifact) / 2);
    } else {
      std::fstream file(artifact, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(100);
      file.put(char(good->binary[100] ^ 0x5A));
    }
    const auto entries = list_cache_entries(dir, true);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_NE(entries[0].problem.find(truncate ? "size" : "checksum"), std::string::npos) << entries[0].problem;

    KernelCache cache(optionsFor(dir));
    auto rebuilt = cache.get(hostKernel(96));
    EXPECT_EQ(cache.stats().quarantined, 1u);
    EXPECT_EQ(cache.stats().compiles, 1u);
    EXPECT_EQ(rebuilt->binary, good->binary) << "the rebuild is identical to the original";
    EXPECT_FALSE(fs::is_empty(fs::path(dir) / "quarantine"));
    EXPECT_TRUE(list_cache_entries(dir, true)[0].problem.empty());
  }
}

// An entry whose manifest has no interface record (an older epjit's, format
// 1) or a record that is damaged is never bound: it is quarantined and
// rebuilt, and the rebuilt entry carries the record.
TEST(CacheDisk, AnEntryWithoutAValidInterfaceIsRebuiltNotMisread) {
  enum class Damage { NoRecord, OlderFormat, BadRecord };
  for (const Damage damage : {Damage::NoRecord, Damage::OlderFormat, Damage::BadRecord}) {
    SCOPED_TRACE(int(damage));
    const std::string dir = freshDir("no-interface-" + std::to_string(int(damage)));
    std::shared_ptr<const KernelArtifact> good;
    {
      KernelCache cache(optionsFor(dir));
      good = cache.get(hostKernel(160));
    }
    const fs::path manifest_path = fs::path(dir) / "entries" / good->key / "manifest.json";
    std::string manifest = good->manifest;
    const size_t at = manifest.find("\"interface\"");
    ASSERT_NE(at, std::string::npos);
    if (damage == Damage::NoRecord) manifest.replace(at, 11, "\"unrelated\"");
    if (damage == Damage::OlderFormat) {
      manifest.replace(at, 11, "\"unrelated\"");
      manifest.replace(manifest.find("\"format\": 2"), 11, "\"format\": 1");
    }
    if (damage == Damage::BadRecord) manifest.replace(manifest.find("\"wave_size\": 32"), 16, "\"wave_size\": \"32\"");
    std::ofstream(manifest_path, std::ios::trunc) << manifest;
    const auto entries = list_cache_entries(dir, true);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_FALSE(entries[0].problem.empty());

    KernelCache cache(optionsFor(dir));
    auto rebuilt = cache.get(hostKernel(160));
    EXPECT_EQ(cache.stats().quarantined, 1u);
    EXPECT_EQ(cache.stats().compiles, 1u);
    ASSERT_TRUE(rebuilt->interface);
    EXPECT_EQ(rebuilt->interface->kernel("quantize_fp8_direct").params.size(), 3u);
    EXPECT_TRUE(list_cache_entries(dir, true)[0].problem.empty());
  }
}

// A stored source without its interface record, or with a damaged one, is
// not used: the compiler generates both again.
TEST(CacheDisk, AStoredSourceWithoutItsInterfaceIsRegenerated) {
  const std::string dir = freshDir("source-without-interface");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(224));
  }
  size_t records = 0;
  for (const auto& item : fs::directory_iterator(fs::path(dir) / "sources")) {
    if (item.path().string().ends_with(".interface.json")) {
      std::ofstream(item.path(), std::ios::trunc) << "{\"format\": 1}";
      ++records;
    }
  }
  ASSERT_EQ(records, 1u);
  fs::remove_all(fs::path(dir) / "entries");
  KernelCache cache(optionsFor(dir));
  auto rebuilt = cache.get(hostKernel(224));
  EXPECT_EQ(cache.stats().sources_generated, 1u);
  EXPECT_EQ(rebuilt->interface->template_name, "quantize_fp8_direct");
}

// A writer SIGKILLed at any point of publishing leaves nothing a reader
// accepts; the next request rebuilds, and the dead writer's staging goes away.
TEST(CacheDisk, AWriterKilledWhilePublishingLeavesNoAcceptedEntry) {
  for (PublishPoint point : {PublishPoint::ArtifactWritten, PublishPoint::ManifestWritten, PublishPoint::BeforeRename}) {
    SCOPED_TRACE(int(point));
    const std::string dir = freshDir("killed-" + std::to_string(int(point)));
    const int status = inChild([&] {
      KernelCache cache(optionsFor(dir));
      cache.set_publish_hook([point](PublishPoint at) {
        if (at == point) raise(SIGKILL);
      });
      cache.get(hostKernel(160));
      return 0;
    });
    ASSERT_EQ(status, 128 + SIGKILL);
    EXPECT_TRUE(list_cache_entries(dir, true).empty()) << "a partial entry is visible";
    EXPECT_FALSE(fs::is_empty(fs::path(dir) / "staging")) << "the writer died before leaving its staging";
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(160));
    EXPECT_EQ(cache.stats().compiles, 1u);
    EXPECT_TRUE(fs::is_empty(fs::path(dir) / "staging")) << "the dead writer's staging was removed";
    EXPECT_EQ(list_cache_entries(dir, true).size(), 1u);
  }
}

TEST(CacheTiers, AMissingOrUnwritableDirectoryMeansMemoryOnly) {
  // Missing and impossible to create (its parent is a file).
  const std::string parent = freshDir("not-a-dir");
  std::ofstream(parent) << "a file";
  KernelCache missing(optionsFor(parent + "/cache"));
  EXPECT_TRUE(missing.memory_only());
  missing.get(hostKernel(64));
  missing.get(hostKernel(64));
  EXPECT_EQ(missing.stats().compiles, 1u);
  EXPECT_EQ(missing.stats().memory_hits, 1u);
}

// A cache this user can read but not write (a pre-warmed one shipped to a
// fleet): its entries are used read-only, new kernels stay in memory. Root
// ignores permissions, so as root the child drops to nobody, with scratch
// space outside the checkout and its own copy of the compiler provider:
// nobody may not be able to enter the checkout at all (make test from an
// owner-only directory), as another user could not read this one's build.
TEST(CacheTiers, AReadOnlyCacheDirectoryServesItsEntries) {
  const bool drop = geteuid() == 0;
  const uid_t user = drop ? 65534 : geteuid();
  const std::string home = testing::scratchOutsideCheckout("read-only", user);
  ASSERT_FALSE(home.empty());
  const std::string dir = home + "/cache";
  const std::string provider = home + "/libepjit_kernel_source.so";
  if (drop) {
    ASSERT_TRUE(fs::copy_file(EPJIT_TEST_KERNEL_SOURCE_LIBRARY, provider));
    fs::permissions(provider, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read |
                                  fs::perms::group_exec | fs::perms::others_exec);
  }
  const auto asUser = [&](const std::function<int()>& body) {
    return inChild([&] {
      if (drop && (setgid(65534) != 0 || setuid(65534) != 0)) return 10;
      setenv("TMPDIR", home.c_str(), 1);
      if (drop) setenv("EPJIT_KERNEL_SOURCE_LIBRARY", provider.c_str(), 1);
      return body();
    });
  };
  EXPECT_EQ(asUser([&] {
              KernelCache warm(optionsFor(dir));
              warm.get(hostKernel(64));
              return ::chmod(dir.c_str(), 0555) == 0 ? 0 : 13;
            }),
            0);
  EXPECT_EQ(asUser([&] {
              KernelCache cache(optionsFor(dir));
              if (!cache.memory_only()) return 11;
              cache.get(hostKernel(64));  // from the read-only directory
              cache.get(hostKernel(72));  // compiled, kept in memory
              const CacheStats stats = cache.stats();
              return stats.readonly_hits == 1 && stats.compiles == 1 ? 0 : 12;
            }),
            0);
  ::chmod(dir.c_str(), 0755);
}

TEST(CacheTiers, ReadOnlyOverlaysAreSearchedAfterTheWritableTier) {
  const std::string warmed = freshDir("overlay-warmed");
  {
    KernelCache cache(optionsFor(warmed));
    cache.get(hostKernel(192));
  }
  CacheOptions options = optionsFor(freshDir("overlay-writable"));
  options.readonly_dirs = {freshDir("overlay-absent"), warmed};
  KernelCache cache(options);
  cache.get(hostKernel(192));
  EXPECT_EQ(cache.stats().readonly_hits, 1u);
  EXPECT_EQ(cache.stats().compiles, 0u);
}

TEST(CacheTiers, TheSizeBoundEvictsTheLeastRecentlyUsed) {
  const std::string dir = freshDir("bounded");
  uint64_t one_entry = 0;
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(32));
    one_entry = list_cache_entries(dir, false)[0].bytes;
    cache.get(hostKernel(40));
  }
  {
    KernelCache toucher(optionsFor(dir));
    toucher.get(hostKernel(32));  // a disk hit records a newer use of hidden=32
  }
  CacheOptions options = optionsFor(dir);
  options.max_bytes = 2 * one_entry + one_entry / 2;
  KernelCache cache(options);
  cache.get(hostKernel(48));  // a third entry goes over the bound
  EXPECT_EQ(cache.stats().evictions, 1u);
  std::set<std::string> left;
  for (const CacheEntryInfo& entry : list_cache_entries(dir, true)) left.insert(entry.spec);
  EXPECT_EQ(left, (std::set<std::string>{"quantize_fp8_direct(hidden=32)@host", "quantize_fp8_direct(hidden=48)@host"}));
}

TEST(CacheBundle, ExportImportVerifiesAndInstalls) {
  const std::string source = freshDir("bundle-source");
  const std::string bundle = std::string(EPJIT_TEST_WORK_DIR) + "/kernels.bundle";
  {
    KernelCache cache(optionsFor(source));
    cache.get(hostKernel(64));
    cache.get(hostKernel(72, "host-gfx1250"));
    EXPECT_EQ(cache.export_bundle(bundle), 2u);
  }
  const std::string target = freshDir("bundle-target");
  {
    KernelCache cache(optionsFor(target));
    const KernelCache::ImportResult result = cache.import_bundle(bundle);
    EXPECT_EQ(result.imported, 2u);
    EXPECT_EQ(result.rejected, 0u);
    EXPECT_EQ(cache.import_bundle(bundle).already_present, 2u);
  }
  // A machine without the compiler: the imported entries load, a miss says what is missing.
  {
    ScopedEnv no_compiler("EPJIT_KERNEL_SOURCE_LIBRARY", "/nonexistent/libepjit_kernel_source.so");
    KernelCache cache(optionsFor(target));
    cache.get(hostKernel(64));
    cache.get(hostKernel(72, "host-gfx1250"));
    EXPECT_EQ(cache.stats().disk_hits, 2u);
    try {
      cache.get(hostKernel(80));
      FAIL() << "compiled without a compiler";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("no compiler is available"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("epjit-warm --import"), std::string::npos) << error.what();
    }
  }
  // One flipped byte in the first entry's artifact: that entry is rejected.
  std::string bytes;
  {
    std::ifstream in(bundle, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  const size_t header = bytes.find("entry ");
  const size_t header_end = bytes.find('\n', header) + 1;
  std::istringstream fields(bytes.substr(header, header_end - header));
  std::string word, key;
  size_t manifest_bytes = 0;
  fields >> word >> key >> manifest_bytes;
  bytes[header_end + manifest_bytes + 100] ^= 0x01;
  std::ofstream(bundle, std::ios::binary | std::ios::trunc) << bytes;
  KernelCache fresh(optionsFor(freshDir("bundle-tampered")));
  const KernelCache::ImportResult tampered = fresh.import_bundle(bundle);
  EXPECT_EQ(tampered.rejected, 1u);
  EXPECT_EQ(tampered.imported, 1u);
  ASSERT_EQ(tampered.problems.size(), 1u);
  EXPECT_NE(tampered.problems[0].find("checksum"), std::string::npos) << tampered.problems[0];
}

// 16 processes started together on an empty directory, all needing the same
// 4 kernels: all succeed, exactly 4 compiles happen, everyone loads the same bytes.
TEST(CacheSingleFlight, SixteenProcessesCompileEachKernelOnce) {
  const std::string dir = freshDir("race");
  const std::string results = freshDir("race-results");
  fs::create_directories(results);
  int start_pipe[2];
  ASSERT_EQ(pipe(start_pipe), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < 16; ++p) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(start_pipe[1]);
      char go;
      if (read(start_pipe[0], &go, 1) != 1) _exit(20);
      try {
        KernelCache cache(optionsFor(dir));
        std::ofstream out(results + "/" + std::to_string(p));
        for (int k = 0; k < 4; ++k) out << cache.get(hostKernel(64 + 8 * k))->artifact_digest << "\n";
        out << "compiles " << cache.stats().compiles << "\n";
        out.close();  // _exit skips destructors
        _exit(out ? 0 : 22);
      } catch (const std::exception& error) {
        std::ofstream(results + "/" + std::to_string(p) + ".error") << error.what();
        _exit(21);
      }
    }
    children.push_back(pid);
  }
  close(start_pipe[0]);
  ASSERT_EQ(write(start_pipe[1], std::string(16, 'g').data(), 16), 16);  // everyone goes at once
  close(start_pipe[1]);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a process failed";
  }
  uint64_t compiles = 0;
  std::set<std::string> digest_sets;
  for (int p = 0; p < 16; ++p) {
    std::ifstream in(results + "/" + std::to_string(p));
    std::string digests, line;
    for (int k = 0; k < 4 && std::getline(in, line); ++k) digests += line + ",";
    std::string word;
    uint64_t count = 0;
    in >> word >> count;
    compiles += count;
    digest_sets.insert(digests);
  }
  EXPECT_EQ(compiles, 4u);
  EXPECT_EQ(digest_sets.size(), 1u) << "processes loaded different bytes";
  EXPECT_EQ(list_cache_entries(dir, true).size(), 4u);
}

// A process that dies holding a key's lock does not block the others.
TEST(CacheSingleFlight, ADeadLockHoldersLockIsRecovered) {
  const std::string dir = freshDir("dead-holder");
  std::string key;
  {
    KernelCache cache(optionsFor(dir));
    key = cache.key(hostKernel(112));
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    const int fd = open((dir + "/locks/" + key + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    if (fcntl(fd, F_OFD_SETLKW, &lock) != 0) _exit(1);
    (void)!write(ready[1], "x", 1);
    pause();  // holds the lock until killed
    _exit(0);
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  std::thread killer([holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(holder, SIGKILL);
  });
  KernelCache cache(optionsFor(dir));
  cache.get(hostKernel(112));  // waits for the holder, which dies
  killer.join();
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(cache.stats().lock_waits, 1u);
  EXPECT_GT(cache.stats().lock_wait_seconds, 0.2);
  EXPECT_EQ(cache.stats().compiles, 1u);
}

TEST(CacheSingleFlight, WaitingIsBoundedAndReported) {
  const std::string dir = freshDir("bounded-wait");
  CacheOptions options = optionsFor(dir);
  options.lock_timeout_seconds = 0.3;
  KernelCache cache(options);
  const std::string key = cache.key(hostKernel(120));
  const int fd = open((dir + "/locks/" + key + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  // An OFD lock held by this other open file description blocks the cache.
  struct flock lock = {};
  lock.l_type = F_WRLCK;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &lock), 0);
  try {
    cache.get(hostKernel(120));
    FAIL() << "the wait was not bounded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("EPJIT_CACHE_LOCK_TIMEOUT_S"), std::string::npos) << error.what();
  }
  close(fd);
}

TEST(CacheOptions, EnvironmentIsParsedAndValidated) {
  ScopedEnv dir("EPJIT_CACHE_DIR", "/tmp/epjit-options-test");
  ScopedEnv readonly("EPJIT_CACHE_READONLY", "/a:/b::/c");
  ScopedEnv max("EPJIT_CACHE_MAX_BYTES", "512M");
  const CacheOptions options = CacheOptions::from_environment();
  EXPECT_EQ(options.dir, "/tmp/epjit-options-test");
  EXPECT_EQ(options.readonly_dirs, (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_EQ(options.max_bytes, 512ull << 20);
  ScopedEnv bad("EPJIT_CACHE_MAX_BYTES", "lots");
  EXPECT_THROW(CacheOptions::from_environment(), Error);
  ScopedEnv bad_level("EPJIT_OPT_LEVEL", "9");
  EXPECT_THROW(CacheOptions::from_environment(), Error);
}

}  // namespace
}  // namespace epjit
