#include "epjit/error.h"

#include <utility>

namespace epjit {
namespace {

std::string compose(const std::string& problem, const std::string& expected,
                    const std::string& fix) {
  return problem + " (expected " + expected + "); fix: " + fix;
}

}  // namespace

Error::Error(std::string problem, std::string expected, std::string fix)
    : std::runtime_error(compose(problem, expected, fix)),
      problem_(std::move(problem)),
      expected_(std::move(expected)),
      fix_(std::move(fix)) {}

}  // namespace epjit
