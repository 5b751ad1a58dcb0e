// Running a tool (compiler, version query) and capturing what it printed.
#pragma once

#include <string>
#include <vector>

namespace epjit {

struct ProcessResult {
  int exit_code = -1;      // -1 when it could not be started or was killed
  std::string output;      // stdout and stderr, interleaved
  double seconds = 0;
};

// Runs argv[0] (searched on PATH when it has no slash) with argv; never throws.
ProcessResult run_process(const std::vector<std::string>& argv);

// "a b 'c d'": for messages.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace epjit
