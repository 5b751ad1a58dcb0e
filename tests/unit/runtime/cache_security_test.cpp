// The kernel cache, its tools and the compiler's header directory against
// other users and crafted files (issue 14): nothing another user owns or can
// write is run or compiled, no key reaches outside the cache, and malformed
// manifests and bundles are errors or quarantines, never aborts. Each of
// these failed at abf6ab6.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../../../runtime/source/embedded.h"
#include "../../common/child_process.h"
#include "../../common/errors.h"
#include "../../common/scoped_environment.h"
#include "../../common/work_dir.h"
#include "cache_fixtures.h"
#include "epjit/cache.h"
#include "epjit/error.h"

namespace epjit {
namespace {

namespace fs = std::filesystem;
using testing::freshDir;

using testing::errorOf;
using testing::hostKernel;
using testing::inChild;
using testing::optionsFor;

std::string entryDirOf(const std::string& dir) {
  for (const auto& item : fs::directory_iterator(fs::path(dir) / "entries")) return item.path().string();
  return "";
}

TEST(CacheTrust, AGroupWritableCacheDirectoryIsRefused) {
  const std::string dir = freshDir("group-writable");
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0775);
  const std::string error = errorOf([&] { KernelCache cache(optionsFor(dir)); });
  EXPECT_NE(error.find("writable by its group"), std::string::npos) << error;
  EXPECT_NE(error.find("chmod go-w " + dir), std::string::npos) << error;
}

TEST(CacheTrust, AnotherUsersCacheDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a directory another user owns";
  // Prepared by nobody with an entry that matches the victim's key and checksum.
  const std::string dir = freshDir("planted");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(64));
  }
  for (const auto& item : fs::recursive_directory_iterator(dir)) ::lchown(item.path().c_str(), 65534, 65534);
  ::lchown(dir.c_str(), 65534, 65534);
  const std::string error = errorOf([&] { KernelCache cache(optionsFor(dir)); });
  EXPECT_NE(error.find("owned by uid 65534"), std::string::npos) << error;
  // As a read-only overlay too (only this user or root may own one).
  CacheOptions overlay = optionsFor(freshDir("victim"));
  overlay.readonly_dirs = {dir};
  EXPECT_NE(errorOf([&] { KernelCache cache(overlay); }).find("owned by uid 65534"), std::string::npos);
}

TEST(CacheTrust, AnEntryFileOfAnotherUserIsNotRun) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const std::string dir = freshDir("foreign-entry");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(80));
  }
  for (const auto& item : fs::directory_iterator(entryDirOf(dir)))
    if (item.path().extension() == ".bin") ::lchown(item.path().c_str(), 65534, 65534);
  KernelCache cache(optionsFor(dir));
  cache.get(hostKernel(80));
  EXPECT_EQ(cache.stats().disk_hits, 0u);
  EXPECT_EQ(cache.stats().quarantined, 1u);
  EXPECT_EQ(cache.stats().compiles, 1u);
}

TEST(CacheTrust, PlantedDeviceHeadersAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to plant a directory as another user";
  const std::string tmp = testing::scratchOutsideCheckout("headers");
  ASSERT_FALSE(tmp.empty());
  // Another user creates this user's header directory name first, with a
  // modified prelude and everything else in place.
  const fs::path planted = fs::path(tmp) / ("epjit-headers-0-" + headers_digest().substr(0, 16));
  for (const EmbeddedFile& file : embedded_headers()) {
    fs::create_directories((planted / std::string(file.name)).parent_path());
    std::ofstream(planted / std::string(file.name)) << file.text;
  }
  std::ofstream(planted / "epjit/targets/host/prelude.h", std::ios::app) << "\n#error planted\n";
  for (const auto& item : fs::recursive_directory_iterator(planted)) ::lchown(item.path().c_str(), 65534, 65534);
  ::lchown(planted.c_str(), 65534, 65534);
  const int status = inChild([&] {
    setenv("TMPDIR", tmp.c_str(), 1);
    try {
      materialized_header_dir();
    } catch (const Error& error) {
      return std::string(error.what()).find("owned by uid 65534") != std::string::npos ? 0 : 2;
    }
    return 1;  // the planted directory was accepted
  });
  EXPECT_EQ(status, 0);
}

TEST(CacheTrust, DamagedDeviceHeadersOfThisUserAreRewritten) {
  const std::string tmp = testing::scratchOutsideCheckout("headers-damaged");
  ASSERT_FALSE(tmp.empty());
  const int status = inChild([&] {
    setenv("TMPDIR", tmp.c_str(), 1);
    const fs::path dir = materialized_header_dir();
    std::ofstream(dir / "epjit/targets/host/prelude.h", std::ios::app) << "\n#error damaged\n";
    return 0;
  });
  ASSERT_EQ(status, 0);
  EXPECT_EQ(inChild([&] {
              setenv("TMPDIR", tmp.c_str(), 1);
              const fs::path dir = materialized_header_dir();
              std::ifstream in(dir / "epjit/targets/host/prelude.h");
              std::stringstream text;
              text << in.rdbuf();
              return text.str().find("#error damaged") == std::string::npos ? 0 : 1;
            }),
            0);
}

TEST(CacheTools, KeysThatAreNotHexAreRefused) {
  const std::string dir = freshDir("tools-keys");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(64));
  }
  const std::string outside = freshDir("tools-outside");
  fs::create_directories(outside + "/keep");
  for (const std::string key : {std::string("../../tools-outside"), std::string(".."), std::string("../..")}) {
    EXPECT_NE(errorOf([&] { remove_cache_entry(dir, key); }).find("is not a cache key"), std::string::npos) << key;
  }
  EXPECT_TRUE(fs::exists(outside + "/keep"));
  EXPECT_EQ(list_cache_entries(dir, true).size(), 1u);
}

TEST(CacheTools, PruneDoesNotFollowALinkedEntriesDirectory) {
  const std::string dir = freshDir("tools-linked");
  const std::string elsewhere = freshDir("tools-elsewhere");
  {
    KernelCache cache(optionsFor(elsewhere));
    cache.get(hostKernel(64));
  }
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  fs::create_directory_symlink(fs::path(elsewhere) / "entries", fs::path(dir) / "entries");
  EXPECT_NE(errorOf([&] { prune_cache(dir, 1); }).find("is a link"), std::string::npos);
  EXPECT_EQ(list_cache_entries(elsewhere, true).size(), 1u) << "the linked entries were touched";
}

// A bundle crafted with a key and a source key that climb out of the cache,
// and one that declares sizes larger than the file: errors, nothing written
// outside, the process alive.
TEST(CacheTools, ACraftedBundleWritesNothingOutsideTheCache) {
  const std::string dir = freshDir("tools-import");
  const std::string outside = freshDir("tools-import-outside");
  fs::create_directories(outside);
  const std::string bundle = dir + ".bundle";
  {
    std::ofstream out(bundle, std::ios::binary);
    out << "EPJIT-BUNDLE 1\nentry ../../tools-import-outside/evil 2 1 0\n{}x" << "end 1\n";
  }
  KernelCache cache(optionsFor(dir));
  EXPECT_NE(errorOf([&] { cache.import_bundle(bundle); }).find("malformed"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(outside));
  {
    std::ofstream out(bundle, std::ios::binary);
    out << "EPJIT-BUNDLE 1\nentry " << std::string(64, 'a') << " 1000000000000 1000000000000 0\n{}" << "end 1\n";
  }
  EXPECT_NE(errorOf([&] { cache.import_bundle(bundle); }).find("larger than what is left"), std::string::npos);
  // A well-formed entry whose manifest climbs out through its source key.
  {
    nlohmann::json manifest = {{"key", std::string(64, 'b')},
                               {"source_key", "../../tools-import-outside/evil"},
                               {"source_digest", "x"},
                               {"artifact", {{"sha256", std::string(64, 'c')}, {"bytes", 1}}}};
    const std::string text = manifest.dump();
    std::ofstream out(bundle, std::ios::binary);
    out << "EPJIT-BUNDLE 1\nentry " << std::string(64, 'b') << " " << text.size() << " 1 3\n" << text << "xsrc"
        << "end 1\n";
  }
  const auto result = cache.import_bundle(bundle);
  EXPECT_EQ(result.rejected, 1u);
  EXPECT_TRUE(fs::is_empty(outside));
}

TEST(CacheTools, ManifestsWithWrongFieldsAreQuarantinedNotFatal) {
  const std::string dir = freshDir("tools-manifests");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(64));
  }
  const fs::path manifest_path = fs::path(entryDirOf(dir)) / "manifest.json";
  std::ifstream in(manifest_path);
  const nlohmann::json good = nlohmann::json::parse(in);
  in.close();
  const std::vector<std::function<void(nlohmann::json&)>> breakers = {
      [](nlohmann::json& m) { m["format"] = "2"; },       [](nlohmann::json& m) { m["key"] = 5; },
      [](nlohmann::json& m) { m.erase("artifact"); },     [](nlohmann::json& m) { m["artifact"]["bytes"] = "1"; },
      [](nlohmann::json& m) { m["toolchain"] = "gcc"; },  [](nlohmann::json& m) { m["interface"] = 3; },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    SCOPED_TRACE(i);
    nlohmann::json broken = good;
    breakers[i](broken);
    std::ofstream(manifest_path, std::ios::trunc) << broken.dump();
    EXPECT_FALSE(list_cache_entries(dir, true).at(0).problem.empty());  // verify reports it, no abort
    KernelCache cache(optionsFor(dir));
    auto artifact = cache.get(hostKernel(64));  // quarantined and rebuilt, not a lasting failure
    EXPECT_FALSE(artifact->binary.empty());
    EXPECT_EQ(cache.stats().quarantined, 1u);
  }
}

TEST(CacheDisk, AGarbageStoredSourceIsRegeneratedNotAPermanentFailure) {
  const std::string dir = freshDir("garbage-source");
  {
    KernelCache cache(optionsFor(dir));
    cache.get(hostKernel(96));
  }
  for (const auto& item : fs::directory_iterator(fs::path(dir) / "sources"))
    if (item.path().extension() == ".src") std::ofstream(item.path(), std::ios::trunc) << "this is not C++";
  fs::remove_all(fs::path(dir) / "entries");
  fs::create_directory(fs::path(dir) / "entries", fs::path(dir));
  for (int run = 0; run < 2; ++run) {
    KernelCache cache(optionsFor(dir));
    EXPECT_FALSE(cache.get(hostKernel(96))->binary.empty()) << "run " << run;
  }
}

// A host compiler that "succeeds" and writes an empty shared object: the
// compile is an error and nothing is published (a later run would load it).
TEST(CacheDisk, AnEmptyArtifactIsNeverPublished) {
  const std::string dir = freshDir("empty-artifact");
  fs::create_directories(dir);
  const std::string compiler = dir + "/empty-c++";
  {
    std::ofstream script(compiler);
    script << "#!/bin/sh\n"
              "if [ \"$1\" = --version ]; then echo 'empty-c++ 1.0'; exit 0; fi\n"
              "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then : > \"$2\"; fi; shift; done\n";
  }
  fs::permissions(compiler, fs::perms::owner_all);
  testing::ScopedEnvironment host_cxx("EPJIT_HOST_CXX", compiler.c_str());
  KernelCache cache(optionsFor(dir + "/cache"));
  const std::string error = errorOf([&] { cache.get(hostKernel(88)); });
  EXPECT_NE(error.find("empty"), std::string::npos) << error;
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(fs::path(dir) / "cache" / "entries", ec)) << "an empty artifact was published";
}

TEST(CacheOptions, NumbersFromTheEnvironmentAreStrict) {
  for (const auto& [name, value] : std::vector<std::pair<const char*, const char*>>{
           {"EPJIT_CACHE_MAX_BYTES", "-1"},
           {"EPJIT_CACHE_MAX_BYTES", "5abc"},
           {"EPJIT_CACHE_LOCK_TIMEOUT_S", "nan"},
           {"EPJIT_CACHE_LOCK_TIMEOUT_S", "inf"},
           {"EPJIT_CACHE_LOCK_TIMEOUT_S", "-3"}}) {
    const std::string error = [&] {
      testing::ScopedEnvironment variable(name, value);
      return errorOf([] { CacheOptions::from_environment(); });
    }();
    EXPECT_NE(error.find(std::string(name) + " is '" + value + "'"), std::string::npos) << name << "=" << value << ": " << error;
  }
}

}  // namespace
}  // namespace epjit
