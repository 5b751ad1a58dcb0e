// A per-test scratch directory under the build tree, emptied first and
// removed when the test process ends.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace epjit::testing {

namespace detail {
// Removes the directories this process made when it exits (not in rank
// processes forked from it, which share them with their parent).
struct ScratchDirs {
  pid_t owner = getpid();
  std::vector<std::string> made;
  ~ScratchDirs() {
    if (getpid() != owner) return;
    std::error_code ignored;
    for (const std::string& dir : made) std::filesystem::remove_all(dir, ignored);
  }
};
inline ScratchDirs& scratchDirs() {
  static ScratchDirs dirs;
  return dirs;
}
}  // namespace detail

// Named after the calling process too: ctest runs each test of a binary as
// its own process, in parallel, and two of them emptying one shared
// directory would delete each other's files mid-test.
inline std::string freshDir(const std::string& name) {
  const std::string dir = std::string(EPJIT_TEST_WORK_DIR) + "/" + name + "." + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  detail::scratchDirs().made.push_back(dir);
  return dir;
}

// A private scratch directory outside the checkout (under /tmp), owned by
// `uid` (the current user by default): for tests that run a child as another
// user, who may not be able to enter the checkout at all.
inline std::string scratchOutsideCheckout(const std::string& name, uid_t uid = ::geteuid()) {
  std::string pattern = "/tmp/epjit-test-" + name + ".XXXXXX";
  if (!::mkdtemp(pattern.data())) return {};
  if (uid != ::geteuid() && ::chown(pattern.c_str(), uid, gid_t(uid == 65534 ? 65534 : -1)) != 0) return {};
  detail::scratchDirs().made.push_back(pattern);
  return pattern;
}

}  // namespace epjit::testing
