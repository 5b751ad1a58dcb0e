#include "epjit/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <string>

#include "epjit/error.h"

namespace epjit {
namespace {

struct LevelName {
  std::string_view name;
  spdlog::level::level_enum level;
};

constexpr std::array kLevels = {
    LevelName{"trace", spdlog::level::trace}, LevelName{"debug", spdlog::level::debug},
    LevelName{"info", spdlog::level::info},   LevelName{"warn", spdlog::level::warn},
    LevelName{"error", spdlog::level::err},   LevelName{"critical", spdlog::level::critical},
    LevelName{"off", spdlog::level::off},
};

spdlog::logger* make_logger() {
  auto* logger = new spdlog::logger("epjit", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[epjit %L] %v");
  // Never throws: the logger is used from destructors and threads. A bad
  // level is refused where work starts (check_log_level); here it falls
  // back to warn and says so once.
  const char* level = std::getenv("EPJIT_LOG_LEVEL");
  spdlog::level::level_enum chosen = spdlog::level::warn;
  bool unknown = false;
  if (level && *level) {
    try {
      chosen = parse_log_level(level);
    } catch (const Error&) {
      unknown = true;
    }
  }
  logger->set_level(chosen);
  if (unknown) logger->warn("EPJIT_LOG_LEVEL '{}' is not a level (trace, debug, info, warn, error, critical, off); using warn", level);
  return logger;
}

}  // namespace

spdlog::level::level_enum parse_log_level(std::string_view name) {
  for (const LevelName& entry : kLevels) {
    if (entry.name == name) return entry.level;
  }
  throw Error("EPJIT_LOG_LEVEL is '" + std::string(name) + "'",
              "one of trace, debug, info, warn, error, critical, off",
              "set EPJIT_LOG_LEVEL to one of those names or unset it (default warn)");
}

// Never destroyed: threads that live as long as the process (the bootstrap
// root) may log while static destructors run at exit.
spdlog::logger& log() {
  static spdlog::logger* const logger = make_logger();
  return *logger;
}

}  // namespace epjit
