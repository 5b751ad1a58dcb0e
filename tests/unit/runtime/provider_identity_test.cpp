// The compiler provider is one file the runtime dlopens, found beside it or
// named by EPJIT_KERNEL_SOURCE_LIBRARY, and a user can point that at another
// build's (an older install, a wheel's). Its kernels would then be cached
// under this runtime's keys, which name this build's compiler and templates,
// and served from the cache even after the variable is fixed. So a provider
// stating another identity, or none, is refused with the reason.
#include <gtest/gtest.h>

#include <string>

#include "../../common/scoped_environment.h"
#include "epjit/kernel_source.h"

namespace epjit {
namespace {

using testing::ScopedEnvironment;

std::string refusal(const char* provider) {
  ScopedEnvironment library("EPJIT_KERNEL_SOURCE_LIBRARY", provider);
  std::string why;
  const std::shared_ptr<KernelSource> source = load_compiler_source(&why);
  EXPECT_EQ(source, nullptr) << provider << " was loaded";
  return why;
}

TEST(CompilerProvider, TheOneBuiltWithThisRuntimeLoads) {
  ScopedEnvironment library("EPJIT_KERNEL_SOURCE_LIBRARY", EPJIT_TEST_KERNEL_SOURCE_LIBRARY);
  std::string why;
  EXPECT_NE(load_compiler_source(&why), nullptr) << why;
}

TEST(CompilerProvider, OneStatingAnotherBuildIsRefused) {
  const std::string why = refusal(EPJIT_TEST_OTHER_BUILD_PROVIDER);
  EXPECT_NE(why.find("was built from other compiler sources or templates than this runtime"), std::string::npos)
      << why;
  EXPECT_NE(why.find("it states \"compiler 00000000"), std::string::npos) << why;
  EXPECT_NE(why.find("this runtime \"compiler "), std::string::npos) << why;
  EXPECT_NE(why.find("point EPJIT_KERNEL_SOURCE_LIBRARY at the provider of this build"), std::string::npos) << why;
}

TEST(CompilerProvider, AnOlderOneStatingNothingIsRefused) {
  const std::string why = refusal(EPJIT_TEST_OLDER_PROVIDER);
  EXPECT_NE(why.find("an older provider: it states none"), std::string::npos) << why;
}

}  // namespace
}  // namespace epjit
