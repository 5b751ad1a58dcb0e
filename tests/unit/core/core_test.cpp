// epjit::Error messages and the EPJIT_LOG_LEVEL parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "epjit/error.h"
#include "epjit/logging.h"
#include "epjit/version.h"

namespace epjit {
namespace {

TEST(Error, MessageSaysWhatWasWrongWhatWasExpectedAndTheFix) {
  const Error error("hidden_dim is 7000", "a multiple of 8", "pad the hidden dimension");
  EXPECT_EQ(std::string(error.what()),
            "hidden_dim is 7000 (expected a multiple of 8); fix: pad the hidden dimension");
  EXPECT_EQ(error.problem(), "hidden_dim is 7000");
  EXPECT_EQ(error.expected(), "a multiple of 8");
  EXPECT_EQ(error.fix(), "pad the hidden dimension");
}

TEST(Logging, ParsesEveryDocumentedLevel) {
  EXPECT_EQ(parse_log_level("trace"), spdlog::level::trace);
  EXPECT_EQ(parse_log_level("debug"), spdlog::level::debug);
  EXPECT_EQ(parse_log_level("info"), spdlog::level::info);
  EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
  EXPECT_EQ(parse_log_level("error"), spdlog::level::err);
  EXPECT_EQ(parse_log_level("critical"), spdlog::level::critical);
  EXPECT_EQ(parse_log_level("off"), spdlog::level::off);
}

TEST(Logging, RejectsAnUnknownLevelNamingTheAcceptedOnes) {
  try {
    parse_log_level("verbose");
    FAIL() << "parse_log_level accepted 'verbose'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'verbose'"), std::string::npos) << e.what();
    EXPECT_NE(e.expected().find("trace, debug, info, warn, error, critical, off"), std::string::npos);
  }
}

TEST(Version, IsSemanticAndHasARevision) {
  const std::string v(version());
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
  EXPECT_FALSE(git_revision().empty());
}

}  // namespace
}  // namespace epjit
