#include "epjit/version.h"

#include "epjit/build_info.h"

namespace epjit {

std::string_view version() { return EPJIT_VERSION; }
std::string_view git_revision() { return EPJIT_GIT_REVISION; }
std::string_view compiler_digest() { return EPJIT_COMPILER_DIGEST; }

}  // namespace epjit
