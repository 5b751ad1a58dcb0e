// EPJIT_ environment variables read strictly: a value that is not entirely a
// number, not finite, or outside the accepted range is an epjit::Error that
// names the variable, the value and the range, never a silent
// reinterpretation ("5abc" is not 5, "nan" is not a timeout).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace epjit {

// The variable's value when set and non-empty.
std::optional<std::string> environment_value(const char* name);

// Parses `text` as a finite number within [min, max]; `name` is for messages.
double parse_seconds(std::string_view text, const char* name, double min, double max);
uint64_t parse_unsigned(std::string_view text, const char* name, uint64_t min, uint64_t max);
// "1073741824", "512K", "512M", "2G": bytes.
uint64_t parse_byte_count(std::string_view text, const char* name);

// A switch: "1" is true, "0" false, `fallback` when unset or empty; anything
// else is an epjit::Error naming the variable, the value and what `on` and
// `off` do (`what_off` is the fix it suggests).
bool environment_switch(const char* name, bool fallback, const char* what_off);

// The variable parsed as above, or `fallback` when it is unset or empty.
double environment_seconds(const char* name, double fallback, double min, double max);

// Throws epjit::Error when EPJIT_LOG_LEVEL names no level: called where work
// starts (communicators, caches, ops), so a typo is reported then rather than
// at the first warning.
void check_log_level();

}  // namespace epjit
