// A compiler provider of another build (provider_identity_test.cpp): the C ABI
// of this one, stating another identity (digests EPJIT_TEST_STATED_DIGEST) or,
// as an older provider, none. Its generate fails loudly, so a runtime that loaded it
// anyway shows in the test as that failure instead of the refusal.
#include <cstdlib>
#include <cstring>

namespace {
char* copy(const char* text) {
  char* out = static_cast<char*>(std::malloc(std::strlen(text) + 1));
  if (out) std::strcpy(out, text);
  return out;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int epjit_kernel_source_generate_v2(const char*, const char*,
                                                                                     const char*, char** source,
                                                                                     char** interface,
                                                                                     char** diagnostics) {
  *source = nullptr;
  *interface = nullptr;
  *diagnostics = copy("a provider of another build was asked to generate");
  return 1;
}

extern "C" __attribute__((visibility("default"))) void epjit_kernel_source_free_v2(char* text) { std::free(text); }

#ifdef EPJIT_TEST_STATED_DIGEST
extern "C" __attribute__((visibility("default"))) const char* epjit_kernel_source_identity_v1() {
  return "compiler " EPJIT_TEST_STATED_DIGEST "\ntemplates " EPJIT_TEST_STATED_DIGEST "\n";
}
#endif
