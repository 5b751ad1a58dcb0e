// A compiler provider of another build (provider_identity_test.cpp): the C ABI
// of this one, stating another identity (digests EPJIT_TEST_STATED_DIGEST) or,
// as an older provider, none. Its generate fails loudly, so a runtime that loaded it
// anyway shows in the test as that failure instead of the refusal.
#include <cstdlib>
#include <cstring>

#include "epjit/interface_schema.h"

namespace {
char* copy(const char* text) {
  char* out = static_cast<char*>(std::malloc(std::strlen(text) + 1));
  if (out) std::strcpy(out, text);
  return out;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int EPJIT_PROVIDER_GENERATE(const char*, const char*, const char*,
                                                                             char** source, char** interface,
                                                                             char** diagnostics) {
  *source = nullptr;
  *interface = nullptr;
  *diagnostics = copy("a provider of another build was asked to generate");
  return 1;
}

extern "C" __attribute__((visibility("default"))) void EPJIT_PROVIDER_FREE(char* text) { std::free(text); }

#ifdef EPJIT_TEST_STATED_DIGEST
extern "C" __attribute__((visibility("default"))) const char* EPJIT_PROVIDER_IDENTITY() {
  return "compiler " EPJIT_TEST_STATED_DIGEST "\ntemplates " EPJIT_TEST_STATED_DIGEST "\n";
}
#endif
