// The bootstrap's wire format: framed messages (socket.h) whose bodies are
// written and read here, the message kinds, and the limits every reader
// enforces before it allocates.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "../core/hmac.h"
#include "epjit/error.h"

namespace epjit::comm {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t kMagic = 0x45504a32;  // "EPJ2"
constexpr size_t kGroupIdBytes = 16;     // public: names the group at the root
constexpr size_t kSecretBytes = 32;      // secret: never sent, only MACs of it
constexpr size_t kNonceBytes = 32;
// The largest group a bootstrap forms (docs/RUNTIME.md).
constexpr uint32_t kMaxWorldSize = 65536;
// The largest collective contribution a rank may send (the root reads no larger frame).
constexpr size_t kMaxContributionBytes = size_t(64) << 20;
// What a rank tells the others about itself (hostname, local socket name).
constexpr size_t kMaxRankBlobBytes = 4096;
// A connection that has not proved it belongs to a group within this long is closed.
constexpr int kHandshakeSeconds = 5;
// Connections still proving themselves; beyond this the longest-waiting one is closed.
constexpr size_t kMaxPendingConnections = 64;

using GroupId = std::array<uint8_t, kGroupIdBytes>;
using Secret = std::array<uint8_t, kSecretBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;

enum class Message : uint8_t {
  Challenge = 1,  // root -> connection: the root's nonce
  Hello = 2,      // rank -> root: group, nonce, rank, world, blob, MAC
  Welcome = 3,    // root -> rank: the root's MAC (the rank checks it is talking to its group's root)
  Table = 4,      // root -> ranks: every rank's blob
  Gather = 5,     // rank -> root: a collective's contribution (sequence, kind, bytes)
  Result = 6,     // root -> ranks: every contribution
  Failure = 7,    // root -> ranks: why the group failed
  Bye = 8,        // rank -> root: destroy(); the root answers by closing the connection
};

// What each collective is, so that ranks calling different ones is an error.
// AllToAll: each contribution is u32 world, then one bytes() per destination
// rank; the root sends each rank only what was addressed to it.
enum class Collective : uint8_t { Barrier = 1, Allgather = 2, AllocateSizes = 3, AllocateMapped = 4, AllToAll = 5 };
const char* collective_name(uint8_t kind);

struct Writer {
  Bytes out;
  Writer& u8(uint8_t v) { return raw(&v, 1); }
  Writer& u32(uint32_t v) { return raw(&v, 4); }
  Writer& u64(uint64_t v) { return raw(&v, 8); }
  Writer& bytes(std::span<const uint8_t> b) { return u32(uint32_t(b.size())).raw(b.data(), b.size()); }
  Writer& text(const std::string& s) { return bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  Writer& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    out.insert(out.end(), c, c + n);
    return *this;
  }
  template <size_t N>
  Writer& fixed(const std::array<uint8_t, N>& a) {
    return raw(a.data(), N);
  }
};

// Reads what a Writer wrote; anything short or oversized is an epjit::Error
// (a malformed message), never an out-of-range read or a huge allocation.
struct Reader {
  std::span<const uint8_t> in;
  size_t at = 0;
  void need(size_t n) const {
    if (n > in.size() || at > in.size() - n)
      throw Error("a truncated bootstrap message", "a well-formed message", "check that only epjit ranks connect");
  }
  uint8_t u8() {
    need(1);
    return in[at++];
  }
  uint32_t u32() { return number<uint32_t>(); }
  uint64_t u64() { return number<uint64_t>(); }
  Bytes bytes(size_t limit = SIZE_MAX) {
    const uint32_t n = u32();
    if (n > limit)
      throw Error("a bootstrap field of " + std::to_string(n) + " bytes", "at most " + std::to_string(limit),
                  "check that only epjit ranks connect");
    need(n);
    Bytes b(in.begin() + long(at), in.begin() + long(at + n));
    at += n;
    return b;
  }
  std::string text(size_t limit = 4096) {
    Bytes b = bytes(limit);
    return {b.begin(), b.end()};
  }
  template <size_t N>
  std::array<uint8_t, N> fixed() {
    need(N);
    std::array<uint8_t, N> a;
    std::memcpy(a.data(), &in[at], N);
    at += N;
    return a;
  }

 private:
  template <typename T>
  T number() {
    const auto bytes = fixed<sizeof(T)>();
    T v;
    std::memcpy(&v, bytes.data(), sizeof(T));
    return v;
  }
};

// The MAC a rank sends in its Hello, and the one the root answers with: both
// bind the group, both nonces, and (for the rank) its rank and world size.
Mac hello_mac(const Secret& secret, const GroupId& group, const Nonce& root_nonce, const Nonce& rank_nonce,
              uint32_t rank, uint32_t world);
Mac welcome_mac(const Secret& secret, const GroupId& group, const Nonce& root_nonce, const Nonce& rank_nonce);
// The MAC that comes with a file descriptor passed between node peers: binds
// the receiver's fresh nonce (from the allocation's first round), the sender's
// rank and the allocation's size.
Mac fd_mac(const Secret& secret, const Nonce& receiver_nonce, uint32_t sender, uint64_t bytes);

}  // namespace epjit::comm
