#pragma once

#include <string_view>

namespace epjit {

// The release version, e.g. "0.1.0".
std::string_view version();
// The source revision the library was built from (git describe), or "unknown".
std::string_view git_revision();
// SHA-256 over the compiler's sources (passes, dialect, TargetInfo): part of every kernel cache key.
std::string_view compiler_digest();

}  // namespace epjit
