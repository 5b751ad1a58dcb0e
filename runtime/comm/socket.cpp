#include "socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "epjit/error.h"

namespace epjit::comm {
namespace {

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<int64_t>(left, 1 << 30));
}

Error timed_out(const std::string& what) {
  return Error("timed out waiting for " + what, "every rank to reach the same point within EPJIT_COMM_TIMEOUT_S",
               "check that every rank was started and is healthy, or raise EPJIT_COMM_TIMEOUT_S");
}

Error vanished(const std::string& what) {
  return Error(what + " closed the connection", "every rank to stay until destroy()",
               "look at the other ranks' output: one of them exited or crashed");
}

void wait_for(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready > 0) return;
    if (ready == 0) throw timed_out(what);
    if (errno != EINTR) throw Error("poll failed: " + std::string(std::strerror(errno)), "a working socket", "retry");
  }
}

// One connect that never blocks past `deadline`: true when connected, false
// when the listener is not there yet or its backlog is full (try again).
// A blocking connect to a Unix socket whose backlog a stranger has filled
// would wait until the listener accepts, which may be never.
bool connect_before(int fd, const sockaddr* address, socklen_t length, Clock::time_point deadline) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  bool connected = ::connect(fd, address, length) == 0;
  if (!connected && errno == EINPROGRESS) {  // TCP: the handshake is under way
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t size = sizeof error;
    connected = ::poll(&p, 1, remaining_ms(deadline)) > 0 &&
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
  }
  ::fcntl(fd, F_SETFL, flags);
  return connected;
}

sockaddr_un unix_address(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file to clean up.
  std::memcpy(address.sun_path + 1, name.data(), std::min(name.size(), sizeof(address.sun_path) - 2));
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof(address.sun_path) - 2));
  return address;
}

// One SCM_RIGHTS message: a small body, one fd in the control data.
struct FdMessage {
  explicit FdMessage(size_t size) : body(size) {
    io = {body.data(), body.size()};
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  std::vector<uint8_t> body;
  iovec io{};
  msghdr header{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
};

}  // namespace

Socket::Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)), pending_(std::move(other.pending_)) {}
Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pending_ = std::move(other.pending_);
  }
  return *this;
}
Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket Socket::listen_tcp(const std::string& address, uint16_t& port) {
  Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw Error("EPJIT_BOOTSTRAP_ADDR '" + address + "' is not an IPv4 address", "an address such as 127.0.0.1",
                "set EPJIT_BOOTSTRAP_ADDR to this host's IPv4 address");
  if (::bind(socket.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(socket.fd(), 256) != 0)
    throw Error("cannot listen on " + address + ": " + std::strerror(errno), "a local address",
                "set EPJIT_BOOTSTRAP_ADDR to one of this host's addresses");
  socklen_t length = sizeof addr;
  ::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &length);
  port = ntohs(addr.sin_port);
  socket.set_nonblocking();
  return socket;
}

Socket Socket::connect_tcp(const std::string& address, uint16_t port, Clock::time_point deadline) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  for (;;) {
    Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect_before(socket.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr, deadline)) {
      int one = 1;
      ::setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return socket;
    }
    if (Clock::now() >= deadline)
      throw Error("cannot reach the bootstrap at " + address + ":" + std::to_string(port) + ": " + std::strerror(errno),
                  "the rank that made the unique id to be running",
                  "start the rank that called get_unique_id, and pass its id unchanged");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Socket Socket::accept(Clock::time_point deadline) const {
  for (;;) {
    wait_for(fd_, POLLIN, deadline, "ranks to connect to the bootstrap");
    Socket accepted = try_accept();
    if (accepted) return accepted;
  }
}

Socket Socket::try_accept() const {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    // Small request/response messages: no Nagle delay (a no-op on Unix sockets).
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return Socket(fd);
}

void Socket::set_nonblocking() const {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

std::vector<std::vector<uint8_t>> Socket::read_available(size_t limit, bool& closed, const std::string& what) {
  closed = false;
  uint8_t chunk[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      pending_.insert(pending_.end(), chunk, chunk + n);
      // A frame header announcing more than the limit ends the connection now,
      // before the bytes arrive.
      if (pending_.size() >= 4) {
        uint32_t length = 0;
        std::memcpy(&length, pending_.data(), 4);
        if (length > limit)
          throw Error(what + " announced a " + std::to_string(length) + "-byte message",
                      "at most " + std::to_string(limit) + " bytes", "check that only epjit ranks connect");
      }
      continue;
    }
    if (n == 0) closed = true;
    else if (errno == EINTR) continue;
    else if (errno != EAGAIN && errno != EWOULDBLOCK) closed = true;
    break;
  }
  std::vector<std::vector<uint8_t>> frames;
  size_t at = 0;
  while (pending_.size() - at >= 4) {
    uint32_t length = 0;
    std::memcpy(&length, pending_.data() + at, 4);
    if (length > limit)
      throw Error(what + " sent a " + std::to_string(length) + "-byte message",
                  "at most " + std::to_string(limit) + " bytes", "check that only epjit ranks connect");
    if (pending_.size() - at - 4 < length) break;
    frames.emplace_back(pending_.begin() + long(at + 4), pending_.begin() + long(at + 4 + length));
    at += 4 + length;
  }
  pending_.erase(pending_.begin(), pending_.begin() + long(at));
  return frames;
}

bool Socket::readable(Clock::time_point deadline) const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, remaining_ms(deadline)) > 0;
}

bool Socket::wait_closed(Clock::time_point deadline) {
  for (;;) {
    if (!readable(deadline)) return false;
    bool closed = false;
    (void)read_available(std::numeric_limits<uint32_t>::max(), closed, "the peer");  // no limit: never throws
    if (closed) return true;
  }
}

std::vector<uint8_t> Socket::frame(const std::vector<uint8_t>& message) {
  const uint32_t length = uint32_t(message.size());
  std::vector<uint8_t> framed(sizeof length + message.size());
  std::memcpy(framed.data(), &length, sizeof length);
  if (!message.empty()) std::memcpy(framed.data() + sizeof length, message.data(), message.size());
  return framed;
}

size_t Socket::send_available(const uint8_t* data, size_t size, bool& broken) const {
  broken = false;
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd_, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    broken = true;
    break;
  }
  return sent;
}

void Socket::send_message(const std::vector<uint8_t>& message, const std::string& what) const {
  const std::vector<uint8_t> frame = Socket::frame(message);
  // A peer that stops reading cannot hold the sender forever.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  for (size_t sent = 0;;) {
    bool broken = false;
    sent += send_available(frame.data() + sent, frame.size() - sent, broken);
    if (broken) throw vanished(what);
    if (sent == frame.size()) return;
    wait_for(fd_, POLLOUT, deadline, what + " to read");
  }
}

std::vector<uint8_t> Socket::receive_message(Clock::time_point deadline, const std::string& what) const {
  auto read_exact = [&](uint8_t* out, size_t size) {
    size_t got = 0;
    while (got < size) {
      wait_for(fd_, POLLIN, deadline, what);
      const ssize_t n = ::recv(fd_, out + got, size - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw vanished(what);
      got += size_t(n);
    }
  };
  uint32_t length = 0;
  read_exact(reinterpret_cast<uint8_t*>(&length), sizeof length);
  if (length > (64u << 20)) throw Error(what + " sent a " + std::to_string(length) + "-byte message", "a bootstrap message", "check that only epjit ranks connect");
  std::vector<uint8_t> message(length);
  read_exact(message.data(), length);
  return message;
}

Socket Socket::listen_unix(const std::string& name) {
  Socket socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t length = 0;
  sockaddr_un address = unix_address(name, length);
  if (::bind(socket.fd(), reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(socket.fd(), 256) != 0)
    throw Error("cannot listen on the local socket @" + name + ": " + std::strerror(errno), "a free name", "retry");
  return socket;
}

Socket Socket::connect_unix(const std::string& name, Clock::time_point deadline) {
  socklen_t length = 0;
  sockaddr_un address = unix_address(name, length);
  for (;;) {
    Socket socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (connect_before(socket.fd(), reinterpret_cast<sockaddr*>(&address), length, deadline)) return socket;
    if (Clock::now() >= deadline) throw timed_out("the local socket of a peer on this node");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Socket::send_fd(int fd, const std::vector<uint8_t>& body) const {
  if (body.empty() || body.size() > kMaxFdMessage)
    throw Error("an fd message of " + std::to_string(body.size()) + " bytes", "1 to " + std::to_string(kMaxFdMessage),
                "report this as a bug");
  FdMessage message(body.size());
  std::memcpy(message.body.data(), body.data(), body.size());
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  if (::sendmsg(fd_, &message.header, MSG_NOSIGNAL) < 0) throw vanished("a peer on this node");
}

int Socket::receive_fd(std::vector<uint8_t>& body, Clock::time_point deadline) const {
  wait_for(fd_, POLLIN, deadline, "shared memory from a peer on this node");
  FdMessage message(kMaxFdMessage);
  const ssize_t got = ::recvmsg(fd_, &message.header, MSG_CMSG_CLOEXEC);
  if (got <= 0) throw vanished("a peer on this node");
  int fd = -1;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message.header); header; header = CMSG_NXTHDR(&message.header, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    // Close every descriptor beyond the first: a sender cannot leak fds into us.
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (fd < 0) fd = received;
      else ::close(received);
    }
  }
  if (fd < 0) throw Error("a peer sent no file descriptor", "SCM_RIGHTS with one fd", "check that only epjit ranks connect");
  if (message.header.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    ::close(fd);
    throw Error("a peer sent an oversized fd message", "one fd and at most " + std::to_string(kMaxFdMessage) + " bytes",
                "check that only epjit ranks connect");
  }
  body.assign(message.body.begin(), message.body.begin() + got);
  return fd;
}

long Socket::peer_uid() const {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
  return long(credentials.uid);
}

}  // namespace epjit::comm
