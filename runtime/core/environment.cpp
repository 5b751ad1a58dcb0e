#include "environment.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "epjit/error.h"
#include "epjit/logging.h"

namespace epjit {
namespace {

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

std::optional<std::string> environment_value(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

double parse_seconds(std::string_view text, const char* name, double min, double max) {
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = copy.empty() ? 0 : std::strtod(copy.c_str(), &end);
  const bool whole = !copy.empty() && end && *end == '\0' && errno == 0;
  if (!whole || !std::isfinite(value) || value < min || value > max)
    throw Error(std::string(name) + " is '" + copy + "'",
                "a number of seconds from " + number_text(min) + " to " + number_text(max),
                std::string("set ") + name + " to such a number, or unset it");
  return value;
}

uint64_t parse_unsigned(std::string_view text, const char* name, uint64_t min, uint64_t max) {
  const std::string copy(text);
  uint64_t value = 0;
  bool ok = !copy.empty() && copy.size() <= 20;
  for (char c : copy) {
    if (c < '0' || c > '9' || value > (std::numeric_limits<uint64_t>::max() - uint64_t(c - '0')) / 10) {
      ok = false;
      break;
    }
    value = value * 10 + uint64_t(c - '0');
  }
  if (!ok || value < min || value > max)
    throw Error(std::string(name) + " is '" + copy + "'",
                "a whole number from " + std::to_string(min) + " to " + std::to_string(max),
                std::string("set ") + name + " to such a number, or unset it");
  return value;
}

uint64_t parse_byte_count(std::string_view text, const char* name) {
  std::string_view digits = text;
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': scale = 1ull << 10; break;
      case 'M': scale = 1ull << 20; break;
      case 'G': scale = 1ull << 30; break;
      default: break;
    }
    if (scale != 1) digits.remove_suffix(1);
  }
  const uint64_t limit = std::numeric_limits<uint64_t>::max() / scale;
  try {
    return parse_unsigned(digits, name, 1, limit) * scale;
  } catch (const Error&) {
    throw Error(std::string(name) + " is '" + std::string(text) + "'",
                "a positive byte count such as 1073741824, 512M or 2G", std::string("fix or unset ") + name);
  }
}

bool environment_switch(const char* name, bool fallback, const char* what_off) {
  const auto value = environment_value(name);
  if (!value) return fallback;
  if (*value == "1") return true;
  if (*value == "0") return false;
  throw Error(std::string(name) + " is '" + *value + "'", "0 or 1",
              std::string("unset it, or set 0 to ") + what_off);
}

double environment_seconds(const char* name, double fallback, double min, double max) {
  const auto value = environment_value(name);
  return value ? parse_seconds(*value, name, min, max) : fallback;
}

void check_log_level() {
  if (const auto level = environment_value("EPJIT_LOG_LEVEL")) parse_log_level(*level);
}

}  // namespace epjit
