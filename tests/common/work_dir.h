// A per-test scratch directory under the build tree, emptied first.
#pragma once

#include <filesystem>
#include <string>

namespace epjit::testing {

inline std::string freshDir(const std::string& name) {
  const std::string dir = std::string(EPJIT_TEST_WORK_DIR) + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace epjit::testing
