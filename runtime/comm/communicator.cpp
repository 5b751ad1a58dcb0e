#include "epjit/comm/communicator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "../core/environment.h"
#include "bootstrap_service.h"
#include "epjit/error.h"
#include "epjit/logging.h"
#include "socket.h"
#include "wire.h"

namespace epjit {
namespace {

using comm::Bytes;
using comm::Clock;
using comm::Message;
using comm::Reader;
using comm::Socket;
using comm::Writer;

double timeout_from(const CommOptions& options) {
  if (options.timeout_seconds > 0) return options.timeout_seconds;
  return environment_seconds("EPJIT_COMM_TIMEOUT_S", 120, 0.001, 86400 * 7);
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

std::string hex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < n; ++i) text += kDigits[data[i] >> 4], text += kDigits[data[i] & 15];
  return text;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

// What the root sent when it is a Failure: its text as an epjit::Error.
[[noreturn]] void throw_failure(Reader& r, const std::string& context) {
  throw Error(context + ": " + r.text(), "every rank of the group healthy and calling the same collectives",
              "look at the other ranks' output; create a new communicator to continue");
}

struct ParsedId {
  std::string address;
  uint16_t port = 0;
  comm::GroupId group{};
  comm::Secret secret{};
};

ParsedId parse_id(const UniqueId& id) {
  const Bytes bytes(id.bytes.begin(), id.bytes.end());
  try {
    Reader r{bytes};
    if (r.u32() != comm::kMagic) throw Error("", "", "");
    ParsedId parsed;
    const uint32_t port = r.u32();
    if (port == 0 || port > 65535) throw Error("", "", "");
    parsed.port = uint16_t(port);
    parsed.address = r.text(64);
    parsed.group = r.fixed<comm::kGroupIdBytes>();
    parsed.secret = r.fixed<comm::kSecretBytes>();
    return parsed;
  } catch (const Error&) {
    throw Error("the unique id is not one Communicator::get_unique_id made", "its 128 bytes unchanged",
                "pass the id from get_unique_id to every rank byte for byte");
  }
}

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
  comm::Secret secret{};
  Socket root;
  Socket local_listener;  // fds from node peers (SCM_RIGHTS)
  std::vector<std::string> hostnames, local_names;
  Team world_team, node_team;
  bool destroyed = false;
  std::string failed;     // a collective failed or timed out: the group is over
  uint64_t sequence = 0;  // collectives this rank has entered
  std::mutex mutex;       // one collective at a time per rank
  // This rank's own copies held now (allocate_symmetric); shared with the
  // buffers' deleters, which may run after the communicator is gone.
  std::shared_ptr<std::atomic<uint64_t>> symmetric_bytes = std::make_shared<std::atomic<uint64_t>>(0);

  std::vector<Bytes> collective(comm::Collective kind, const Bytes& mine) {
    if (destroyed) throw Error("the communicator was destroyed", "a live communicator", "do not use it after destroy()");
    if (!failed.empty())
      throw Error("the communicator failed earlier: " + failed, "a healthy group",
                  "destroy it and create a new communicator on every rank");
    const uint64_t number = ++sequence;
    const std::string what = std::string(comm::collective_name(uint8_t(kind))) + " #" + std::to_string(number);
    try {
      root.send_message(Writer().u8(uint8_t(Message::Gather)).u64(number).u8(uint8_t(kind)).bytes(mine).out,
                        "the bootstrap");
      const Bytes reply = root.receive_message(after(timeout), "the other ranks in " + what + " (EPJIT_COMM_TIMEOUT_S " +
                                                                   seconds_text(timeout) + " s)");
      Reader r{reply};
      const auto type = Message(r.u8());
      if (type == Message::Failure) throw_failure(r, what + " failed");
      if (type != Message::Result) throw Error("an unexpected reply to " + what, "a result", "report this as a bug");
      const uint32_t count = r.u32();
      if (count != uint32_t(world))
        throw Error(what + " returned " + std::to_string(count) + " contributions", std::to_string(world),
                    "report this as a bug");
      std::vector<Bytes> all(count);
      for (Bytes& part : all) part = r.bytes();
      return all;
    } catch (const Error& error) {
      failed = error.what();  // the stream is out of step now: nothing later can be trusted
      throw;
    }
  }

  // Receives every node peer's fd for one allocation, each proven to come
  // from that peer: same user (SO_PEERCRED), the group's MAC over this rank's
  // fresh nonce, the sender's rank and the size. Anything else is closed and
  // logged, never mapped.
  // Runs while this rank sends its own fds (allocate_symmetric), so both
  // directions progress whatever a stranger queued on either socket; stops
  // early when `abandon` is set (the sending side failed).
  void receive_peer_fds(SymmetricBuffer& buffer, const comm::Nonce& nonce, Clock::time_point deadline,
                        const std::atomic<bool>& abandon) {
    size_t missing = size_t(node_team.size() - 1);
    while (missing > 0) {
      if (abandon) return;
      const Clock::time_point slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
      if (!local_listener.readable(slice)) {
        if (Clock::now() >= deadline) local_listener.accept(deadline);  // throws: timed out
        continue;
      }
      Socket incoming = local_listener.try_accept();
      if (!incoming) continue;
      if (incoming.peer_uid() != long(::geteuid())) {
        log().warn("refused a connection to this rank's local socket from uid {}", incoming.peer_uid());
        continue;
      }
      Bytes body;
      int fd = -1;
      try {
        fd = incoming.receive_fd(body, std::min(deadline, after(comm::kHandshakeSeconds)));
      } catch (const Error& error) {
        log().warn("dropped a connection to this rank's local socket: {}", error.problem());
        continue;
      }
      Reader r{body};
      std::optional<uint32_t> from;
      try {
        const uint32_t sender = r.u32();
        const uint64_t bytes = r.u64();
        const Mac mac = r.fixed<32>();
        if (bytes == buffer.bytes && node_team.index_of(int(sender)) >= 0 && int(sender) != rank &&
            !buffer.peers.at(sender) && equal_in_constant_time(mac, comm::fd_mac(secret, nonce, sender, bytes)))
          from = sender;
      } catch (const Error&) {
      }
      if (!from) {
        ::close(fd);
        log().warn("refused shared memory on this rank's local socket: it did not prove it comes from a node peer");
        continue;
      }
      ShareableMemory theirs;
      theirs.fd = fd;
      theirs.bytes = buffer.bytes;
      try {
        buffer.peers[*from] = device->open_shareable(theirs);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      --missing;
    }
  }
};

UniqueId Communicator::get_unique_id() {
  comm::GroupId group{};
  comm::Secret secret{};
  fill_random(group);
  fill_random(secret);
  const comm::Endpoint endpoint = comm::register_group(group, secret);
  Writer w;
  w.u32(comm::kMagic).u32(endpoint.port).text(endpoint.address).fixed(group).fixed(secret);
  UniqueId id;
  if (w.out.size() > id.bytes.size())
    throw Error("EPJIT_BOOTSTRAP_ADDR '" + endpoint.address + "' is too long for a unique id", "an IPv4 address",
                "set EPJIT_BOOTSTRAP_ADDR to this host's IPv4 address");
  std::memcpy(id.bytes.data(), w.out.data(), w.out.size());
  return id;
}

std::unique_ptr<Communicator> Communicator::init(int world_size, int rank, const UniqueId& id, Device& device,
                                                 CommOptions options) {
  if (world_size < 1 || uint32_t(world_size) > comm::kMaxWorldSize || rank < 0 || rank >= world_size)
    throw Error("Communicator::init(world_size " + std::to_string(world_size) + ", rank " + std::to_string(rank) + ")",
                "1 <= world_size <= " + std::to_string(comm::kMaxWorldSize) + " and 0 <= rank < world_size",
                "pass this rank and the group size");
  if (options.gpu_per_node && *options.gpu_per_node < 1)
    throw Error("CommOptions.gpu_per_node = " + std::to_string(*options.gpu_per_node), "at least 1",
                "set it to the GPUs per node, or leave it unset");
  check_log_level();
  const ParsedId parsed = parse_id(id);

  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world_size;
  impl->timeout = timeout_from(options);
  impl->device = &device;
  impl->secret = parsed.secret;
  const Clock::time_point deadline = after(impl->timeout);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // The local socket's name is random: it carries nothing of the secret.
  std::array<uint8_t, 12> name{};
  fill_random(name);
  const std::string local_name = "epjit-" + hex(name.data(), name.size()) + "-" + std::to_string(rank);
  impl->local_listener = Socket::listen_unix(local_name);

  const std::string joining = "rank " + std::to_string(rank) + " of " + std::to_string(world_size);
  try {
    // A root busy with many strangers may close a new connection before its
    // challenge: connect again until the deadline.
    Bytes challenge;
    for (;;) {
      impl->root = Socket::connect_tcp(parsed.address, parsed.port, deadline);
      try {
        challenge = impl->root.receive_message(deadline, "the bootstrap's challenge");
        break;
      } catch (const Error&) {
        if (Clock::now() >= deadline) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    Reader c{challenge};
    if (Message(c.u8()) != Message::Challenge) throw Error("the bootstrap did not challenge", "", "");
    const comm::Nonce root_nonce = c.fixed<comm::kNonceBytes>();
    comm::Nonce rank_nonce{};
    fill_random(rank_nonce);
    const Bytes blob = Writer().text(host).text(local_name).out;
    impl->root.send_message(Writer()
                                .u8(uint8_t(Message::Hello))
                                .u32(comm::kMagic)
                                .fixed(parsed.group)
                                .fixed(rank_nonce)
                                .u32(uint32_t(rank))
                                .u32(uint32_t(world_size))
                                .bytes(blob)
                                .fixed(comm::hello_mac(parsed.secret, parsed.group, root_nonce, rank_nonce,
                                                       uint32_t(rank), uint32_t(world_size)))
                                .out,
                            "the bootstrap");
    Bytes welcome = impl->root.receive_message(deadline, "the bootstrap to admit this rank");
    Reader w{welcome};
    const auto type = Message(w.u8());
    if (type == Message::Failure) throw_failure(w, joining);
    if (type != Message::Welcome ||
        !equal_in_constant_time(w.fixed<32>(), comm::welcome_mac(parsed.secret, parsed.group, root_nonce, rank_nonce)))
      throw Error(joining + ": the bootstrap did not prove it holds the group's secret",
                  "the bootstrap of the rank that made the unique id", "pass the id from get_unique_id unchanged");
    Bytes table = impl->root.receive_message(deadline, "every rank to join the bootstrap");
    Reader t{table};
    const auto table_type = Message(t.u8());
    if (table_type == Message::Failure) throw_failure(t, joining);
    if (table_type != Message::Table || t.u32() != uint32_t(world_size))
      throw Error(joining + ": a malformed table from the bootstrap", "every rank's entry", "report this as a bug");
    for (int i = 0; i < world_size; ++i) {
      Bytes entry = t.bytes(comm::kMaxRankBlobBytes);
      Reader b{entry};
      impl->hostnames.push_back(b.text(256));
      impl->local_names.push_back(b.text(256));
    }
  } catch (const Error& error) {
    if (error.problem().rfind(joining, 0) == 0) throw;
    throw Error(joining + ": " + error.problem(), error.expected(), error.fix());
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
  } catch (const std::exception& error) {
    log().warn("communicator destroy: {}", error.what());
  }
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world; }
const Team& Communicator::world() const { return impl_->world_team; }
const Team& Communicator::node() const { return impl_->node_team; }
const std::string& Communicator::hostname_of(int rank) const { return impl_->hostnames.at(size_t(rank)); }
Device& Communicator::device() const { return *impl_->device; }
uint64_t Communicator::symmetric_bytes() const { return impl_->symmetric_bytes->load(); }

std::vector<Bytes> Communicator::allgather(const Bytes& mine) {
  std::lock_guard lock(impl_->mutex);
  return impl_->collective(comm::Collective::Allgather, mine);
}

std::vector<Bytes> Communicator::alltoall(const std::vector<Bytes>& to_each) {
  if (to_each.size() != size_t(impl_->world))
    throw Error("alltoall with " + std::to_string(to_each.size()) + " parts", std::to_string(impl_->world) + " (one per rank)",
                "pass one (possibly empty) part per rank");
  Writer contribution;
  contribution.u32(uint32_t(impl_->world));
  for (const Bytes& part : to_each) contribution.bytes(part);
  std::lock_guard lock(impl_->mutex);
  return impl_->collective(comm::Collective::AllToAll, contribution.out);
}

void Communicator::barrier() {
  std::lock_guard lock(impl_->mutex);
  impl_->collective(comm::Collective::Barrier, {});
}

std::shared_ptr<SymmetricBuffer> Communicator::allocate_symmetric(size_t bytes) {
  std::lock_guard lock(impl_->mutex);
  Device& device = *impl_->device;
  // The deleter unmaps the peers' copies; the device must outlive the buffer.
  auto buffer = std::shared_ptr<SymmetricBuffer>(
      new SymmetricBuffer, [device = &device, held = impl_->symmetric_bytes](SymmetricBuffer* b) {
        for (void* peer : b->peers)
          if (peer && peer != b->local) device->close_shareable(peer, b->bytes);
        if (b->local) {
          device->free_shareable(b->local, b->bytes);
          held->fetch_sub(b->bytes);
        }
        delete b;
      });
  ShareableMemory mine = device.allocate_shareable(bytes);  // zero-filled
  buffer->local = mine.pointer;
  buffer->bytes = bytes;
  impl_->symmetric_bytes->fetch_add(bytes);
  buffer->peers.assign(size_t(impl_->world), nullptr);
  buffer->peers[size_t(impl_->rank)] = mine.pointer;
  struct FdGuard {
    int fd;
    ~FdGuard() {
      if (fd >= 0) ::close(fd);
    }
  } guard{mine.fd};
  // Everyone agrees on the size, learns the IPC handles (GPU devices) and
  // each rank's fresh nonce for the fds of this allocation (host device).
  comm::Nonce nonce{};
  fill_random(nonce);
  const auto all = impl_->collective(comm::Collective::AllocateSizes,
                                     Writer().u64(bytes).fixed(nonce).bytes(mine.ipc_handle).out);
  const Clock::time_point deadline = after(impl_->timeout);
  std::vector<comm::Nonce> nonces(size_t(impl_->world));
  for (int peer : impl_->node_team.ranks) {
    Reader r{all[size_t(peer)]};
    const uint64_t theirs_bytes = r.u64();
    nonces[size_t(peer)] = r.fixed<comm::kNonceBytes>();
    if (theirs_bytes != bytes)
      throw Error("ranks asked for different symmetric sizes (" + std::to_string(bytes) + " here, " +
                      std::to_string(theirs_bytes) + " on rank " + std::to_string(peer) + ")",
                  "the same size on every rank", "allocate collectively with one size");
    if (peer == impl_->rank || device.sharing() != SharingMethod::IpcHandle) continue;
    ShareableMemory theirs;
    theirs.bytes = bytes;
    theirs.ipc_handle = r.bytes(4096);
    buffer->peers[size_t(peer)] = device.open_shareable(theirs);
  }
  if (device.sharing() == SharingMethod::FileDescriptor) {
    // This rank's memfd goes to every node peer over its local socket, with
    // the proof the peer checks; the peers' come in the same way, received
    // on another thread meanwhile (two ranks that only sent first would wait
    // on each other's backlog).
    std::atomic<bool> sending_failed{false};
    std::exception_ptr receiving_failed;
    std::thread receiver([&] {
      try {
        impl_->receive_peer_fds(*buffer, nonce, deadline, sending_failed);
      } catch (...) {
        receiving_failed = std::current_exception();
      }
    });
    try {
      for (int peer : impl_->node_team.ranks) {
        if (peer == impl_->rank) continue;
        Socket channel = Socket::connect_unix(impl_->local_names[size_t(peer)], deadline);
        if (channel.peer_uid() != long(::geteuid()))
          throw Error("the local socket of rank " + std::to_string(peer) + " belongs to uid " +
                          std::to_string(channel.peer_uid()),
                      "a node peer of this user", "run every rank as the same user");
        channel.send_fd(mine.fd, Writer()
                                     .u32(uint32_t(impl_->rank))
                                     .u64(bytes)
                                     .fixed(comm::fd_mac(impl_->secret, nonces[size_t(peer)], uint32_t(impl_->rank), bytes))
                                     .out);
      }
    } catch (...) {
      sending_failed = true;
      receiver.join();
      throw;
    }
    receiver.join();
    if (receiving_failed) std::rethrow_exception(receiving_failed);
  }
  impl_->collective(comm::Collective::AllocateMapped, {});  // every rank has mapped every peer
  return buffer;
}

void Communicator::destroy() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->destroyed) return;
  impl_->destroyed = true;
  // The root closes the connection once it has handled the Bye, and only
  // after it sent every reply owed to the group. Waiting for that close keeps
  // a rank whose process hosts the root (the one that made the unique id)
  // from exiting while another rank's last reply is still to be sent.
  try {
    impl_->root.send_message(Writer().u8(uint8_t(Message::Bye)).out, "the bootstrap");
    if (!impl_->root.wait_closed(after(impl_->timeout)))
      log().warn("communicator destroy: the bootstrap did not confirm rank {}'s exit within EPJIT_COMM_TIMEOUT_S {} s",
                 impl_->rank, seconds_text(impl_->timeout));
  } catch (const Error&) {
  }
  impl_->root = Socket();
}

}  // namespace epjit
