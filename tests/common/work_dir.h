// A per-test scratch directory under the build tree, emptied first and
// removed when the test process ends.
#pragma once

#include <unistd.h>

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

}  // namespace epjit::testing
