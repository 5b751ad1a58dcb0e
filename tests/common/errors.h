// What a piece of test code threw, as text: the tests compare messages, since
// every epjit::Error says what was wrong, what was expected and how to fix it.
#pragma once

#include <string>
#include <utility>

#include "epjit/error.h"

namespace epjit::testing {

// The message of the epjit::Error `body` throws, or "" when it throws none.
template <typename Body>
std::string errorOf(Body&& body) {
  try {
    std::forward<Body>(body)();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace epjit::testing
