#include "epjit/version.h"

#include "epjit/build_info.h"

namespace epjit {

std::string_view version() { return EPJIT_VERSION; }
std::string_view git_revision() { return EPJIT_GIT_REVISION; }

}  // namespace epjit
