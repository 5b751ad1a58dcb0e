// Sanitizer builds of the e2e tests: instrument the host kernels with the same
// sanitizer (EPJIT_HOST_CXXFLAGS, in their cache key), take kernel source from
// the regular build's compiler library, and set the sanitizers' options.
// Environment set before a test starts cannot come from ctest's ENVIRONMENT
// reliably for discovered tests, so the binary sets it itself.
#include <cstdlib>

#ifdef EPJIT_E2E_SANITIZER
extern "C" const char* __tsan_default_options() { return "halt_on_error=1:second_deadlock_stack=1:die_after_fork=0"; }
extern "C" const char* __asan_default_options() { return "detect_leaks=1:abort_on_error=1"; }

namespace {
const bool configured = [] {
  setenv("EPJIT_HOST_CXXFLAGS", "-fsanitize=" EPJIT_E2E_SANITIZER " -fno-omit-frame-pointer", 0);
#ifdef EPJIT_E2E_KERNEL_SOURCE
  setenv("EPJIT_KERNEL_SOURCE_LIBRARY", EPJIT_E2E_KERNEL_SOURCE, 0);
#endif
  return true;
}();
}  // namespace
#endif
