// The epjit logger (spdlog), its level taken from EPJIT_LOG_LEVEL.
#pragma once

#include <spdlog/logger.h>

#include <string_view>

namespace epjit {

// The process-wide epjit logger, writing to stderr. Created on first use with
// the level EPJIT_LOG_LEVEL names (trace, debug, info, warn, error, critical,
// off; default warn). An unknown level throws epjit::Error.
spdlog::logger& log();

// Parses a level name as EPJIT_LOG_LEVEL accepts it; throws epjit::Error.
spdlog::level::level_enum parse_log_level(std::string_view name);

}  // namespace epjit
