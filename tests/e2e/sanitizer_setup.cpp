// Sanitizer builds of the e2e tests: instrument the host kernels with the same
// sanitizer (EPJIT_HOST_CXXFLAGS, in their cache key), take kernel source from
// the regular build's compiler library, and set the sanitizers' options.
// Environment set before a test starts cannot come from ctest's ENVIRONMENT
// reliably for discovered tests, so the binary sets it itself.
#include <cstdlib>

#ifdef EPJIT_E2E_SANITIZER
// intercept_tls_get_addr=0: GCC 12's TSan runtime takes a dynamic TLS block
// that starts 16 bytes past a page boundary for a pre-2.25 glibc block and
// reads its range from the 16 bytes before it. The host kernels' warp context
// is a thread_local of a dlopen'd library, so its blocks come from malloc and
// 3 of 15 runs of the 14 w3/w4 cases got a garbage range of ~135 TB whose shadow
// reset failed ("ThreadSanitizer failed to allocate 0x1ec1... bytes ...
// (errno: 12)", in __tls_get_addr) before the test could check anything
// (google/sanitizers#1322, fixed in later runtimes). The interception only
// resets shadow that TSan's malloc already reset when it made the block.
extern "C" const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:intercept_tls_get_addr=0";
}
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
