#include "bootstrap_service.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "epjit/logging.h"
#include "socket.h"

namespace epjit::comm {
namespace {

// An id nobody used is forgotten after this long (it is a table entry, no
// thread and no socket).
constexpr auto kUnusedGroupLifetime = std::chrono::hours(24);
// The largest frame a connection may send before it has authenticated.
constexpr size_t kHelloLimit = 8192;
constexpr size_t kMemberLimit = kMaxContributionBytes;
// A rank reads each collective's result before it contributes to the next,
// so an honest rank has at most a few replies waiting however long it is
// stopped (a debugger may hold it for minutes: its peers' timeouts decide).
// One that piles up more is closed, failing its group.
constexpr size_t kMaxUnreadReplies = 16;

using Framed = std::shared_ptr<const Bytes>;  // one reply, shared by every rank it goes to

struct Connection {
  Socket socket;
  Nonce root_nonce{};
  Clock::time_point handshake_deadline;
  bool member = false;
  GroupId group{};
  uint32_t rank = 0;
  // Replies the socket has not taken yet, oldest first. The service never
  // blocks on one reader: the other ranks' replies go out meanwhile.
  std::deque<Framed> outbox;
  size_t front_sent = 0;
  // The rank said Bye: its connection closes once its group is owed nothing,
  // which is what the rank's destroy() waits for.
  bool leaving = false;
};

struct Group {
  Secret secret{};
  Clock::time_point forget_after;
  uint32_t world = 0;                       // fixed by the first rank to join
  std::vector<std::optional<size_t>> members;  // connection ids by rank
  std::vector<Bytes> blobs;
  size_t joined = 0;
  bool formed = false;
  std::string failure;  // once set, every member got it and the group is over
  // The collective in progress: contributions by rank, with their sequence and kind.
  std::vector<std::optional<Bytes>> contributions;
  std::vector<uint64_t> sequences;
  std::vector<uint8_t> kinds;
  std::vector<bool> gone;
};

class Service {
 public:
  Service() {
    const char* address_env = std::getenv("EPJIT_BOOTSTRAP_ADDR");
    endpoint_.address = address_env && *address_env ? address_env : "127.0.0.1";
    listener_ = Socket::listen_tcp(endpoint_.address, endpoint_.port);
    std::thread([this] { run(); }).detach();  // lives as long as the process
  }

  Endpoint add(const GroupId& id, const Secret& secret) {
    std::lock_guard lock(mutex_);
    Group group;
    group.secret = secret;
    group.forget_after = Clock::now() + kUnusedGroupLifetime;
    groups_[id] = std::move(group);
    return endpoint_;
  }

 private:
  void run() {
    for (;;) {
      try {
        step();
      } catch (const std::exception& error) {
        log().warn("bootstrap: {}", error.what());
      } catch (...) {
        log().warn("bootstrap: an unknown failure");
      }
    }
  }

  // One poll: accept, read, handle, send what waits, expire, close.
  void step() {
    std::vector<pollfd> polled{{listener_.fd(), POLLIN, 0}};
    std::vector<size_t> ids;
    Clock::time_point next = Clock::now() + std::chrono::seconds(60);
    for (auto& [id, connection] : connections_) {
      const short events = short(POLLIN | (connection.outbox.empty() ? 0 : POLLOUT));
      polled.push_back({connection.socket.fd(), events, 0});
      ids.push_back(id);
      if (!connection.member) next = std::min(next, connection.handshake_deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    ::poll(polled.data(), polled.size(), int(std::clamp<int64_t>(wait, 0, 60000)));
    if (polled[0].revents & POLLIN) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short revents = polled[i + 1].revents;
      if (revents & POLLOUT)
        if (auto found = connections_.find(ids[i]); found != connections_.end()) flush(ids[i], found->second);
      if (revents & ~POLLOUT) serve(ids[i]);
    }
    expire();
    drop_broken();
    close_left();
  }

  // Queues one message for a connection and sends what its socket takes now.
  void post(size_t id, Connection& connection, const Framed& framed) {
    connection.outbox.push_back(framed);
    flush(id, connection);
    if (connection.outbox.size() > kMaxUnreadReplies)
      broken_.emplace(id, "it left " + std::to_string(connection.outbox.size()) +
                              " replies unread (a rank reads each collective's result before its next)");
  }

  void post(size_t id, Connection& connection, const Bytes& message) {
    post(id, connection, std::make_shared<const Bytes>(Socket::frame(message)));
  }

  void flush(size_t id, Connection& connection) {
    while (!connection.outbox.empty()) {
      const Bytes& front = *connection.outbox.front();
      bool broken = false;
      const size_t sent = connection.socket.send_available(front.data() + connection.front_sent,
                                                           front.size() - connection.front_sent, broken);
      connection.front_sent += sent;
      if (broken) {
        broken_.emplace(id, "");  // dropped after this step: callers may hold its group
        return;
      }
      if (connection.front_sent < front.size()) return;  // the socket is full: POLLOUT resumes
      connection.outbox.pop_front();
      connection.front_sent = 0;
    }
  }

  void drop_broken() {
    while (!broken_.empty()) {
      const auto [id, why] = *broken_.begin();
      broken_.erase(broken_.begin());
      drop(id, why);
    }
  }

  // Closes the connections of ranks that said Bye once no member of their
  // group waits for a reply: the close is the rank's receipt, so the process
  // hosting this service may exit once its own rank sees it.
  void close_left() {
    std::vector<size_t> closing;
    for (const auto& [id, connection] : connections_) {
      if (!connection.leaving) continue;
      const Group* group = group_of(connection.group);
      bool owed = false;
      for (size_t r = 0; group && !owed && r < group->members.size(); ++r) {
        if (!group->members[r] || *group->members[r] == id) continue;
        auto member = connections_.find(*group->members[r]);
        owed = member != connections_.end() && !member->second.outbox.empty();
      }
      if (!owed) closing.push_back(id);
    }
    for (size_t id : closing) drop(id, "");
  }

  void accept_all() {
    for (;;) {
      Socket socket = listener_.try_accept();
      if (!socket) return;
      // At the limit, the connection that has waited longest without proving
      // anything makes room: a rank answers its challenge at once, so the
      // ones left waiting are the idle.
      std::optional<size_t> oldest;
      size_t pending = 0;
      for (const auto& [id, connection] : connections_) {
        if (connection.member) continue;
        ++pending;
        if (!oldest || connection.handshake_deadline < connections_.at(*oldest).handshake_deadline) oldest = id;
      }
      if (pending >= kMaxPendingConnections && oldest) connections_.erase(*oldest);
      socket.set_nonblocking();
      const size_t id = next_id_++;
      Connection& connection = connections_[id];
      fill_random(connection.root_nonce);
      connection.handshake_deadline = Clock::now() + std::chrono::seconds(kHandshakeSeconds);
      connection.socket = std::move(socket);
      post(id, connection, Writer().u8(uint8_t(Message::Challenge)).fixed(connection.root_nonce).out);
    }
  }

  void serve(size_t id) {
    auto found = connections_.find(id);
    if (found == connections_.end()) return;
    Connection& connection = found->second;
    bool closed = false;
    std::vector<Bytes> frames;
    try {
      frames = connection.socket.read_available(connection.member ? kMemberLimit : kHelloLimit, closed,
                                                connection.member ? rank_name(connection) : "a connection");
    } catch (const Error& error) {
      drop(id, error.problem());
      return;
    }
    for (const Bytes& frame : frames) {
      if (!connections_.count(id)) return;
      try {
        if (connections_.at(id).member) member_message(id, frame);
        else hello(id, frame);
      } catch (const Error& error) {
        drop(id, error.problem());
        return;
      }
    }
    if (closed && connections_.count(id)) drop(id, "");
  }

  static std::string rank_name(const Connection& connection) { return "rank " + std::to_string(connection.rank); }

  Group* group_of(const GroupId& id) {
    std::lock_guard lock(mutex_);
    auto found = groups_.find(id);
    return found == groups_.end() ? nullptr : &found->second;
  }

  // The connection is dropped right after: what its socket does not take at
  // once is lost, and a rank that just said Hello reads everything we send.
  void refuse(size_t id, Connection& connection, const std::string& why) {
    post(id, connection, Writer().u8(uint8_t(Message::Failure)).text("bootstrap refused: " + why).out);
  }

  void hello(size_t id, const Bytes& frame) {
    Connection& connection = connections_.at(id);
    Reader r{frame};
    if (r.u8() != uint8_t(Message::Hello) || r.u32() != kMagic) throw Error("not an epjit hello", "", "");
    const GroupId group_id = r.fixed<kGroupIdBytes>();
    const Nonce rank_nonce = r.fixed<kNonceBytes>();
    const uint32_t rank = r.u32(), world = r.u32();
    Bytes blob = r.bytes(kMaxRankBlobBytes);
    const Mac mac = r.fixed<32>();
    Group* group = group_of(group_id);
    // One answer for an unknown group and a wrong secret: a stranger learns nothing.
    if (!group || !equal_in_constant_time(mac, hello_mac(group->secret, group_id, connection.root_nonce, rank_nonce,
                                                         rank, world))) {
      refuse(id, connection, "authentication failed: the unique id's secret does not match this bootstrap's group");
      throw Error("a connection failed to authenticate", "", "");
    }
    std::string why;
    if (!group->failure.empty()) why = group->failure;
    else if (world == 0 || world > kMaxWorldSize)
      why = "world_size " + std::to_string(world) + " is outside [1, " + std::to_string(kMaxWorldSize) + "]";
    else if (group->world && world != group->world)
      why = "rank " + std::to_string(rank) + " asked for world_size " + std::to_string(world) + ", but the group's first rank asked for " +
            std::to_string(group->world);
    else if (rank >= world)
      why = "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")";
    else if (group->world && group->members[rank])
      why = "rank " + std::to_string(rank) + " joined twice";
    else if (group->formed)
      why = "the group has already formed";
    if (!why.empty()) {
      refuse(id, connection, why);
      // A mismatch every rank must hear about: the group cannot form.
      if (group->world && world != group->world && group->failure.empty()) fail(group_id, *group, why);
      throw Error("refused: " + why, "", "");
    }
    if (!group->world) {
      group->world = world;
      group->members.assign(world, std::nullopt);
      group->blobs.assign(world, Bytes());
      group->contributions.assign(world, std::nullopt);
      group->sequences.assign(world, 0);
      group->kinds.assign(world, 0);
      group->gone.assign(world, false);
    }
    connection.member = true;
    connection.group = group_id;
    connection.rank = rank;
    group->members[rank] = id;
    group->blobs[rank] = std::move(blob);
    ++group->joined;
    post(id, connection,
         Writer().u8(uint8_t(Message::Welcome)).fixed(welcome_mac(group->secret, group_id, connection.root_nonce, rank_nonce)).out);
    if (group->joined == group->world) {
      group->formed = true;
      Writer table;
      table.u8(uint8_t(Message::Table)).u32(group->world);
      for (const Bytes& b : group->blobs) table.bytes(b);
      broadcast(*group, table.out);
    }
  }

  void member_message(size_t id, const Bytes& frame) {
    Connection& connection = connections_.at(id);
    Group* group = group_of(connection.group);
    if (!group) throw Error("the group is gone", "", "");
    Reader r{frame};
    const auto type = Message(r.u8());
    const uint32_t rank = connection.rank;
    if (type == Message::Bye) {
      group->gone[rank] = true;
      if (group->failure.empty() && any_contribution(*group))
        fail(connection.group, *group, "rank " + std::to_string(rank) + " left (destroy) while others were in a collective");
      connection.leaving = true;  // close_left() closes it
      finish_round(connection.group, *group);
      return;
    }
    if (type != Message::Gather || !group->formed) throw Error("an unexpected message from " + rank_name(connection), "", "");
    if (!group->failure.empty()) {
      post(id, connection, Writer().u8(uint8_t(Message::Failure)).text(group->failure).out);
      return;
    }
    if (group->contributions[rank]) throw Error(rank_name(connection) + " sent two contributions to one collective", "", "");
    group->sequences[rank] = r.u64();
    group->kinds[rank] = r.u8();
    group->contributions[rank] = r.bytes(kMemberLimit);
    if (std::count(group->gone.begin(), group->gone.end(), true) > 0) {
      fail(connection.group, *group, "rank " + std::to_string(rank) + " called a collective after another rank left (destroy)");
      return;
    }
    finish_round(connection.group, *group);
  }

  static bool any_contribution(const Group& group) {
    for (const auto& c : group.contributions)
      if (c) return true;
    return false;
  }

  // When every member still here has contributed: the result, or a failure
  // naming the ranks whose collectives differ.
  void finish_round(const GroupId& id, Group& group) {
    if (!group.failure.empty()) return;
    size_t present = 0;
    std::optional<uint32_t> first;
    for (uint32_t r = 0; r < group.world; ++r) {
      if (group.gone[r]) continue;
      if (!group.contributions[r]) return;
      ++present;
      if (!first) first = r;
    }
    if (!present) {
      forget(id);  // everyone left
      return;
    }
    for (uint32_t r = 0; r < group.world; ++r) {
      if (group.gone[r] || r == *first) continue;
      if (group.sequences[r] != group.sequences[*first] || group.kinds[r] != group.kinds[*first]) {
        fail(id, group,
             "collectives do not match: rank " + std::to_string(*first) + " is in " +
                 collective_name(group.kinds[*first]) + " #" + std::to_string(group.sequences[*first]) + ", rank " +
                 std::to_string(r) + " in " + collective_name(group.kinds[r]) + " #" + std::to_string(group.sequences[r]));
        return;
      }
    }
    if (Collective(group.kinds[*first]) == Collective::AllToAll) {
      deliver_parts(id, group);
      return;
    }
    Writer result;
    result.u8(uint8_t(Message::Result)).u32(group.world);
    for (auto& contribution : group.contributions) {
      result.bytes(contribution ? *contribution : Bytes());
      contribution.reset();
    }
    broadcast(group, result.out);
  }

  // AllToAll: rank r gets, from every rank s, the part s addressed to r. A
  // contribution that is not world parts fails the group (its sender is not
  // an epjit rank of this build).
  void deliver_parts(const GroupId& id, Group& group) {
    std::vector<std::vector<Bytes>> parts(group.world);
    for (uint32_t s = 0; s < group.world; ++s) {
      if (group.gone[s] || !group.contributions[s]) continue;
      try {
        Reader r{*group.contributions[s]};
        if (r.u32() != group.world) throw Error("", "", "");
        for (uint32_t d = 0; d < group.world; ++d) parts[s].push_back(r.bytes());
      } catch (const Error&) {
        fail(id, group, "rank " + std::to_string(s) + " sent a malformed alltoall contribution");
        return;
      }
      group.contributions[s].reset();
    }
    for (uint32_t d = 0; d < group.world; ++d) {
      if (!group.members[d] || group.gone[d]) continue;
      Writer result;
      result.u8(uint8_t(Message::Result)).u32(group.world);
      for (uint32_t s = 0; s < group.world; ++s) result.bytes(parts[s].empty() ? Bytes() : parts[s][d]);
      auto found = connections_.find(*group.members[d]);
      if (found != connections_.end()) post(found->first, found->second, result.out);
    }
  }

  void broadcast(Group& group, const Bytes& message) {
    const Framed framed = std::make_shared<const Bytes>(Socket::frame(message));
    for (uint32_t r = 0; r < group.world; ++r) {
      if (!group.members[r] || group.gone[r]) continue;
      auto found = connections_.find(*group.members[r]);
      if (found != connections_.end()) post(found->first, found->second, framed);
    }
  }

  void fail(const GroupId& id, Group& group, const std::string& why) {
    if (!group.failure.empty()) return;
    group.failure = why;
    log().warn("bootstrap: a group failed: {}", why);
    broadcast(group, Writer().u8(uint8_t(Message::Failure)).text(why).out);
    (void)id;
  }

  void forget(const GroupId& id) {
    std::lock_guard lock(mutex_);
    groups_.erase(id);
  }

  // Ends a connection; a member's end fails its group (while others still need it).
  void drop(size_t id, const std::string& why) {
    auto found = connections_.find(id);
    if (found == connections_.end()) return;
    Connection connection = std::move(found->second);
    connections_.erase(found);
    if (!connection.member) return;
    Group* group = group_of(connection.group);
    if (!group) return;
    group->members[connection.rank].reset();
    const bool everyone_left = [&] {
      for (uint32_t r = 0; r < group->world; ++r)
        if (group->members[r]) return false;
      return true;
    }();
    if (everyone_left) {
      forget(connection.group);
      return;
    }
    if (!group->gone[connection.rank])
      fail(connection.group, *group,
           rank_name(connection) + " closed its connection to the bootstrap without destroy()" +
               (why.empty() ? " (it exited or crashed)" : ": " + why));
  }

  void expire() {
    const auto now = Clock::now();
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->second.member && now >= it->second.handshake_deadline) it = connections_.erase(it);
      else ++it;
    }
    std::lock_guard lock(mutex_);
    for (auto it = groups_.begin(); it != groups_.end();) {
      if (it->second.joined == 0 && now >= it->second.forget_after) it = groups_.erase(it);
      else ++it;
    }
  }

  Endpoint endpoint_;
  Socket listener_;
  std::mutex mutex_;  // groups_: registration happens on other threads
  std::map<GroupId, Group> groups_;
  std::map<size_t, Connection> connections_;  // only the service thread touches these
  // Connections to drop at the end of this step, and why (ids are never
  // reused, so one closed meanwhile is simply not found).
  std::map<size_t, std::string> broken_;
  size_t next_id_ = 0;
};

}  // namespace

Endpoint register_group(const GroupId& group, const Secret& secret) {
  // One service per process; a forked child (which has no copy of the thread)
  // starts its own.
  static std::mutex mutex;
  static Service* service = nullptr;
  static pid_t owner = 0;
  std::lock_guard lock(mutex);
  if (!service || owner != ::getpid()) {
    service = new Service();  // lives as long as the process: its thread uses it
    owner = ::getpid();
  }
  return service->add(group, secret);
}

}  // namespace epjit::comm
