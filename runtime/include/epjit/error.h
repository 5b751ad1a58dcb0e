// epjit::Error: every bad input (config, shapes, dtypes, target, cache state)
// is reported with one, and its message always says three things: what was
// wrong, what was expected, and how to fix it.
#pragma once

#include <stdexcept>
#include <string>

namespace epjit {

class Error : public std::runtime_error {
 public:
  // problem: what was wrong, with the offending value;
  // expected: what would have been accepted;
  // fix: what the user can do about it.
  Error(std::string problem, std::string expected, std::string fix);

  const std::string& problem() const noexcept { return problem_; }
  const std::string& expected() const noexcept { return expected_; }
  const std::string& fix() const noexcept { return fix_; }

 private:
  std::string problem_;
  std::string expected_;
  std::string fix_;
};

}  // namespace epjit
