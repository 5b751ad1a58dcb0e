#include "socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
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

sockaddr_un unix_address(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file to clean up.
  std::memcpy(address.sun_path + 1, name.data(), std::min(name.size(), sizeof(address.sun_path) - 2));
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof(address.sun_path) - 2));
  return address;
}

// One SCM_RIGHTS message: a 4-byte tag in the body, one fd in the control data.
struct FdMessage {
  explicit FdMessage(uint32_t value) : tag(value) {
    io = {&tag, sizeof tag};
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  uint32_t tag;
  iovec io{};
  msghdr header{};
  char control[CMSG_SPACE(sizeof(int))] = {};
};

}  // namespace

Socket::Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
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
  return socket;
}

Socket Socket::connect_tcp(const std::string& address, uint16_t port, Clock::time_point deadline) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  for (;;) {
    Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(socket.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
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
  wait_for(fd_, POLLIN, deadline, "ranks to connect to the bootstrap");
  return Socket(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
}

bool Socket::readable(Clock::time_point deadline) const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, remaining_ms(deadline)) > 0;
}

void Socket::send_message(const std::vector<uint8_t>& message, const std::string& what) const {
  const uint32_t length = uint32_t(message.size());
  const auto* length_bytes = reinterpret_cast<const uint8_t*>(&length);
  std::vector<uint8_t> frame(length_bytes, length_bytes + sizeof length);
  frame.insert(frame.end(), message.begin(), message.end());
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw vanished(what);
    sent += size_t(n);
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
    if (::connect(socket.fd(), reinterpret_cast<sockaddr*>(&address), length) == 0) return socket;
    if (Clock::now() >= deadline) throw timed_out("the local socket of a peer on this node");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Socket::send_fd(int fd, uint32_t tag) const {
  FdMessage message(tag);
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  if (::sendmsg(fd_, &message.header, MSG_NOSIGNAL) < 0) throw vanished("a peer on this node");
}

int Socket::receive_fd(uint32_t& tag, Clock::time_point deadline) const {
  wait_for(fd_, POLLIN, deadline, "shared memory from a peer on this node");
  FdMessage message(0);
  if (::recvmsg(fd_, &message.header, MSG_CMSG_CLOEXEC) <= 0) throw vanished("a peer on this node");
  tag = message.tag;
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  if (!header || header->cmsg_type != SCM_RIGHTS) throw Error("a peer sent no file descriptor", "SCM_RIGHTS", "retry");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof fd);
  return fd;
}

}  // namespace epjit::comm
