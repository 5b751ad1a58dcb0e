// HMAC-SHA256 (RFC 2104) and a constant-time comparison: how ranks prove they
// hold the group's secret without sending it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace epjit {

using Mac = std::array<uint8_t, 32>;

Mac hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Equal in time independent of where the first difference is.
bool equal_in_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Bytes from /dev/urandom; throws epjit::Error when it cannot be read.
void fill_random(std::span<uint8_t> out);

}  // namespace epjit
