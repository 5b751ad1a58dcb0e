// SHA-256, for cache keys and artifact checksums (no crypto library needed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace epjit {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  std::array<uint8_t, 32> digest();
  std::string hex();  // 64 lowercase hex digits

 private:
  void block(const uint8_t* chunk);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

inline std::string sha256_hex(std::string_view text) { return Sha256().update(text).hex(); }

}  // namespace epjit
