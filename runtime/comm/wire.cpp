#include "wire.h"

#include <string_view>

namespace epjit::comm {
namespace {

Mac mac_of(const Secret& secret, std::string_view label, const Writer& fields) {
  Writer message;
  message.raw(label.data(), label.size()).raw(fields.out.data(), fields.out.size());
  return hmac_sha256(secret, message.out);
}

}  // namespace

const char* collective_name(uint8_t kind) {
  switch (Collective(kind)) {
    case Collective::Barrier: return "barrier";
    case Collective::Allgather: return "allgather";
    case Collective::AllocateSizes: return "allocate_symmetric";
    case Collective::AllocateMapped: return "allocate_symmetric (mapping)";
    case Collective::AllToAll: return "alltoall";
  }
  return "an unknown collective";
}

Mac hello_mac(const Secret& secret, const GroupId& group, const Nonce& root_nonce, const Nonce& rank_nonce,
              uint32_t rank, uint32_t world) {
  return mac_of(secret, "epjit hello", Writer().fixed(group).fixed(root_nonce).fixed(rank_nonce).u32(rank).u32(world));
}

Mac welcome_mac(const Secret& secret, const GroupId& group, const Nonce& root_nonce, const Nonce& rank_nonce) {
  return mac_of(secret, "epjit welcome", Writer().fixed(group).fixed(root_nonce).fixed(rank_nonce));
}

Mac fd_mac(const Secret& secret, const Nonce& receiver_nonce, uint32_t sender, uint64_t bytes) {
  return mac_of(secret, "epjit fd", Writer().fixed(receiver_nonce).u32(sender).u64(bytes));
}

}  // namespace epjit::comm
