#include "hmac.h"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "epjit/error.h"
#include "sha256.h"

namespace epjit {

Mac hmac_sha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> padded{};
  if (key.size() > kBlock) {
    const auto digest = Sha256().update(key.data(), key.size()).digest();
    std::copy(digest.begin(), digest.end(), padded.begin());
  } else {
    std::copy(key.begin(), key.end(), padded.begin());
  }
  std::array<uint8_t, kBlock> inner_pad, outer_pad;
  for (size_t i = 0; i < kBlock; ++i) {
    inner_pad[i] = uint8_t(padded[i] ^ 0x36);
    outer_pad[i] = uint8_t(padded[i] ^ 0x5c);
  }
  const auto inner = Sha256().update(inner_pad.data(), kBlock).update(message.data(), message.size()).digest();
  return Sha256().update(outer_pad.data(), kBlock).update(inner.data(), inner.size()).digest();
}

bool equal_in_constant_time(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  uint8_t difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= uint8_t(a[i] ^ b[i]);
  return difference == 0;
}

void fill_random(std::span<uint8_t> out) {
  const int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (random >= 0 && got < out.size()) {
    const ssize_t n = ::read(random, out.data() + got, out.size() - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  if (random >= 0) ::close(random);
  if (got != out.size())
    throw Error("cannot read /dev/urandom", "a readable /dev/urandom for the group's secret and nonces",
                "check the system's /dev/urandom");
}

}  // namespace epjit
