#include "epjit/comm/communicator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "epjit/error.h"
#include "epjit/logging.h"
#include "socket.h"

namespace epjit {
namespace {

using comm::Clock;
using comm::Socket;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kMagic = 0x45504a31;  // "EPJ1"
constexpr size_t kTokenBytes = 32;
enum Type : uint8_t { Hello = 1, Table = 2, Gather = 3, Result = 4, Failure = 5, Bye = 6 };

// ------------------------------------------------------------ encoding

struct Writer {
  Bytes out;
  Writer& u8(uint8_t v) { return raw(&v, 1); }
  Writer& u32(uint32_t v) { return raw(&v, 4); }
  Writer& bytes(const Bytes& b) { return u32(uint32_t(b.size())).raw(b.data(), b.size()); }
  Writer& text(const std::string& s) { return bytes(Bytes(s.begin(), s.end())); }
  Writer& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    out.insert(out.end(), c, c + n);
    return *this;
  }
};

struct Reader {
  const Bytes& in;
  size_t at = 0;
  void need(size_t n) const {
    if (at + n > in.size()) throw Error("a truncated bootstrap message", "a well-formed message", "check that only epjit ranks connect");
  }
  uint8_t u8() { need(1); return in[at++]; }
  uint32_t u32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, &in[at], 4);
    at += 4;
    return v;
  }
  Bytes bytes() {
    const uint32_t n = u32();
    need(n);
    Bytes b(in.begin() + long(at), in.begin() + long(at + n));
    at += n;
    return b;
  }
  std::string text() {
    Bytes b = bytes();
    return {b.begin(), b.end()};
  }
};

Bytes failure(const std::string& why) { return Writer().u8(Failure).text(why).out; }

double timeout_from(const CommOptions& options) {
  if (options.timeout_seconds > 0) return options.timeout_seconds;
  if (const char* value = std::getenv("EPJIT_COMM_TIMEOUT_S"); value && *value) {
    try {
      return std::stod(value);
    } catch (...) {
      throw Error(std::string("EPJIT_COMM_TIMEOUT_S is '") + value + "'", "a number of seconds", "fix or unset it");
    }
  }
  return 120;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
}

std::string hex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < n; ++i) text += kDigits[data[i] >> 4], text += kDigits[data[i] & 15];
  return text;
}

// ------------------------------------------------------------ the bootstrap root

// Serves one group of ranks: admits them (checking the token), hands out the
// table, then runs collective rounds until every rank says goodbye.
class Root {
 public:
  Root(Socket listener, std::array<uint8_t, kTokenBytes> token) : listener_(std::move(listener)), token_(token) {
    std::thread([this] { serve(); }).detach();  // lives until its ranks leave; owns itself
  }

 private:
  void serve() {
    try {
      admit();
      rounds();
    } catch (const Error& error) {
      log().warn("bootstrap: {}", error.what());
      for (Socket& rank : ranks_)
        if (rank) try { rank.send_message(failure(error.what()), "a rank"); } catch (...) {}
    }
    delete this;
  }

  void admit() {
    // The first connection fixes world_size; then every rank has the timeout to arrive.
    Clock::time_point deadline = Clock::time_point::max();
    for (size_t joined = 0; ranks_.empty() || joined < ranks_.size();) {
      Socket peer = listener_.accept(deadline);
      Bytes hello;
      try {
        hello = peer.receive_message(after(10), "a connecting rank");
      } catch (const Error&) {
        continue;
      }
      Reader r{hello};
      std::string refusal;
      uint32_t rank = 0, world = 0;
      Bytes blob;
      try {
        if (r.u8() != Hello || r.u32() != kMagic) throw Error("not an epjit bootstrap message", "", "");
        r.need(kTokenBytes);
        uint8_t diff = 0;
        for (size_t i = 0; i < kTokenBytes; ++i) diff |= uint8_t(r.in[r.at + i] ^ token_[i]);
        r.at += kTokenBytes;
        rank = r.u32();
        world = r.u32();
        blob = r.bytes();
        if (diff) refusal = "authentication failed: the unique id's token does not match this bootstrap";
        else if (!ranks_.empty() && world != ranks_.size())
          refusal = "world_size " + std::to_string(world) + " differs from the first rank's " + std::to_string(ranks_.size());
        else if (world == 0 || rank >= world)
          refusal = "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")";
        else if (!ranks_.empty() && ranks_[rank])
          refusal = "rank " + std::to_string(rank) + " joined twice";
      } catch (const Error&) {
        refusal = "a malformed hello";
      }
      if (!refusal.empty()) {
        try { peer.send_message(failure("bootstrap refused: " + refusal), "a refused rank"); } catch (...) {}
        continue;
      }
      if (ranks_.empty()) {
        ranks_.resize(world);
        blobs_.resize(world);
        deadline = Clock::now() + std::chrono::seconds(600);
      }
      ranks_[rank] = std::move(peer);
      blobs_[rank] = std::move(blob);
      ++joined;
    }
    Writer table;
    table.u8(Table).u32(uint32_t(blobs_.size()));
    for (const Bytes& blob : blobs_) table.bytes(blob);
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r].send_message(table.out, "rank " + std::to_string(r));
  }

  void rounds() {
    std::vector<bool> gone(ranks_.size(), false);
    for (;;) {
      std::vector<Bytes> contributions(ranks_.size());
      size_t arrived = 0, leaving = 0;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (gone[r]) continue;
        // Between rounds ranks may compute for a long time; a closed socket ends it.
        Bytes message = ranks_[r].receive_message(Clock::time_point::max(), "rank " + std::to_string(r));
        Reader reader{message};
        const uint8_t type = reader.u8();
        if (type == Bye) {
          gone[r] = true;
          ++leaving;
          continue;
        }
        contributions[r] = reader.bytes();
        ++arrived;
      }
      if (arrived == 0) return;  // everyone left
      if (leaving) throw Error("a rank left (destroy) while others were in a collective", "", "");
      Writer result;
      result.u8(Result).u32(uint32_t(contributions.size()));
      for (const Bytes& contribution : contributions) result.bytes(contribution);
      for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r].send_message(result.out, "rank " + std::to_string(r));
    }
  }

  Socket listener_;
  std::array<uint8_t, kTokenBytes> token_;
  std::vector<Socket> ranks_;
  std::vector<Bytes> blobs_;
};

}  // namespace

// ------------------------------------------------------------ the rank side

int Team::index_of(int rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), rank);
  return it == ranks.end() ? -1 : int(it - ranks.begin());
}

class Communicator::Impl {
 public:
  int rank = 0, world = 0;
  double timeout = 120;
  Device* device = nullptr;
  Socket root;
  Socket local_listener;  // SCM_RIGHTS from node peers
  std::string local_name;
  std::vector<std::string> hostnames, local_names;
  Team world_team, node_team;
  bool destroyed = false;
  std::mutex mutex;  // one collective at a time per rank
  std::vector<std::shared_ptr<SymmetricBuffer>> buffers;

  std::vector<Bytes> collective(const Bytes& mine) {
    if (destroyed) throw Error("the communicator was destroyed", "a live communicator", "do not use it after destroy()");
    root.send_message(Writer().u8(Gather).bytes(mine).out, "the bootstrap");
    Bytes reply = root.receive_message(Clock::time_point::max(), "the bootstrap");
    Reader r{reply};
    const uint8_t type = r.u8();
    if (type == Failure) throw Error("a collective failed: " + r.text(), "every rank healthy", "look at the other ranks");
    std::vector<Bytes> all(r.u32());
    for (Bytes& part : all) part = r.bytes();
    return all;
  }
};

UniqueId Communicator::get_unique_id() {
  const char* address_env = std::getenv("EPJIT_BOOTSTRAP_ADDR");
  const std::string address = address_env && *address_env ? address_env : "127.0.0.1";
  uint16_t port = 0;
  Socket listener = Socket::listen_tcp(address, port);
  std::array<uint8_t, kTokenBytes> token{};
  const int random = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (random < 0 || ::read(random, token.data(), token.size()) != ssize_t(token.size()))
    throw Error("cannot read /dev/urandom for the bootstrap token", "a readable /dev/urandom", "check the system");
  ::close(random);
  new Root(std::move(listener), token);
  UniqueId id;
  Writer w;
  w.u32(kMagic).u32(uint32_t(port)).text(address).raw(token.data(), token.size());
  std::memcpy(id.bytes.data(), w.out.data(), std::min(w.out.size(), id.bytes.size()));
  return id;
}

std::unique_ptr<Communicator> Communicator::init(int world_size, int rank, const UniqueId& id, Device& device,
                                                 CommOptions options) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw Error("Communicator::init(world_size " + std::to_string(world_size) + ", rank " + std::to_string(rank) + ")",
                "0 <= rank < world_size", "pass this rank and the group size");
  Bytes id_bytes(id.bytes.begin(), id.bytes.end());
  Reader r{id_bytes};
  if (r.u32() != kMagic)
    throw Error("the unique id is not one Communicator::get_unique_id made", "its 128 bytes unchanged",
                "pass the id from get_unique_id to every rank byte for byte");
  const uint16_t port = uint16_t(r.u32());
  const std::string address = r.text();
  r.need(kTokenBytes);
  const uint8_t* token = &id_bytes[r.at];

  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world_size;
  impl->timeout = timeout_from(options);
  impl->device = &device;
  const Clock::time_point deadline = after(impl->timeout);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  impl->local_name = "epjit-" + hex(token, 8) + "-" + std::to_string(rank);
  impl->local_listener = Socket::listen_unix(impl->local_name);

  impl->root = Socket::connect_tcp(address, port, deadline);
  Writer hello;
  hello.u8(Hello).u32(kMagic).raw(token, kTokenBytes).u32(uint32_t(rank)).u32(uint32_t(world_size));
  hello.bytes(Writer().text(host).text(impl->local_name).out);
  impl->root.send_message(hello.out, "the bootstrap");
  Bytes table;
  try {
    table = impl->root.receive_message(deadline, "every rank to join the bootstrap");
  } catch (const Error& error) {
    throw Error("rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ": " + error.problem(),
                error.expected(), error.fix());
  }
  Reader t{table};
  const uint8_t type = t.u8();
  if (type == Failure) throw Error(t.text(), "the unique id of this group", "pass the id from get_unique_id unchanged");
  const uint32_t count = t.u32();
  for (uint32_t i = 0; i < count; ++i) {
    Bytes blob = t.bytes();
    Reader b{blob};
    impl->hostnames.push_back(b.text());
    impl->local_names.push_back(b.text());
  }
  for (int i = 0; i < world_size; ++i) impl->world_team.ranks.push_back(i);
  for (int i = 0; i < world_size; ++i) {
    const bool same_node = options.gpu_per_node ? i / *options.gpu_per_node == rank / *options.gpu_per_node
                                                : impl->hostnames[i] == impl->hostnames[rank];
    if (same_node) impl->node_team.ranks.push_back(i);
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() {
  try {
    destroy();
  } catch (const Error& error) {
    log().warn("communicator destroy: {}", error.what());
  }
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
const Team& Communicator::world() const { return impl_->world_team; }
const Team& Communicator::node() const { return impl_->node_team; }
const std::string& Communicator::hostname_of(int rank) const { return impl_->hostnames.at(size_t(rank)); }
Device& Communicator::device() const { return *impl_->device; }

std::vector<Bytes> Communicator::allgather(const Bytes& mine) {
  std::lock_guard lock(impl_->mutex);
  return impl_->collective(mine);
}

void Communicator::barrier() { allgather({}); }

std::shared_ptr<SymmetricBuffer> Communicator::allocate_symmetric(size_t bytes) {
  std::lock_guard lock(impl_->mutex);
  Device& device = *impl_->device;
  const Clock::time_point deadline = after(impl_->timeout);
  // The deleter unmaps the peers' copies; the device must outlive the buffer.
  auto buffer = std::shared_ptr<SymmetricBuffer>(new SymmetricBuffer, [device = &device](SymmetricBuffer* b) {
    for (void* peer : b->peers)
      if (peer && peer != b->local) device->close_shareable(peer, b->bytes);
    device->free_shareable(b->local, b->bytes);
    delete b;
  });
  ShareableMemory mine = device.allocate_shareable(bytes);  // zero-filled
  buffer->local = mine.pointer;
  buffer->bytes = bytes;
  buffer->peers.assign(size_t(impl_->world), nullptr);
  buffer->peers[size_t(impl_->rank)] = mine.pointer;
  // Everyone agrees on the size and learns the IPC handles (GPU devices).
  const auto all = impl_->collective(Writer().u32(uint32_t(bytes)).bytes(mine.ipc_handle).out);
  for (int peer : impl_->node_team.ranks) {
    Reader r{all[size_t(peer)]};
    if (r.u32() != uint32_t(bytes))
      throw Error("ranks asked for different symmetric sizes", "the same size on every rank", "allocate collectively");
    if (peer == impl_->rank || device.sharing() != SharingMethod::IpcHandle) continue;
    ShareableMemory theirs;
    theirs.bytes = bytes;
    theirs.ipc_handle = r.bytes();
    buffer->peers[size_t(peer)] = device.open_shareable(theirs);
  }
  if (device.sharing() == SharingMethod::FileDescriptor) {
    // fds (memfds) travel over each node peer's Unix socket (SCM_RIGHTS).
    for (int peer : impl_->node_team.ranks) {
      if (peer == impl_->rank) continue;
      Socket channel = Socket::connect_unix(impl_->local_names[size_t(peer)], deadline);
      channel.send_fd(mine.fd, uint32_t(impl_->rank));
    }
    for (int i = 1; i < impl_->node_team.size(); ++i) {
      Socket incoming = impl_->local_listener.accept(deadline);
      uint32_t from = 0;
      const int fd = incoming.receive_fd(from, deadline);
      ShareableMemory theirs;
      theirs.fd = fd;
      theirs.bytes = bytes;
      buffer->peers.at(from) = device.open_shareable(theirs);
      ::close(fd);
    }
    ::close(mine.fd);
  }
  impl_->collective({});  // every rank has mapped every peer
  return buffer;
}

void Communicator::destroy() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->destroyed) return;
  impl_->destroyed = true;
  try {
    impl_->root.send_message(Writer().u8(Bye).out, "the bootstrap");
  } catch (const Error&) {
  }
  impl_->root = Socket();
}

}  // namespace epjit
