// Sockets for the bootstrap: framed messages over TCP with deadlines, and
// file descriptors over Unix sockets (SCM_RIGHTS). Every wait is bounded;
// a closed peer or an expired deadline is an epjit::Error, never a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace epjit::comm {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  ~Socket();
  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

  // A listening TCP socket on address:0 (an ephemeral port).
  static Socket listen_tcp(const std::string& address, uint16_t& port);
  static Socket connect_tcp(const std::string& address, uint16_t port, Clock::time_point deadline);
  Socket accept(Clock::time_point deadline) const;

  // [u32 length][bytes]. `what` names the peer in errors.
  void send_message(const std::vector<uint8_t>& message, const std::string& what) const;
  std::vector<uint8_t> receive_message(Clock::time_point deadline, const std::string& what) const;
  // Whether a message (or the peer's close) is waiting.
  bool readable(Clock::time_point deadline) const;

  // Unix sockets in the abstract namespace, for passing fds between processes.
  static Socket listen_unix(const std::string& name);
  static Socket connect_unix(const std::string& name, Clock::time_point deadline);
  void send_fd(int fd, uint32_t tag) const;
  int receive_fd(uint32_t& tag, Clock::time_point deadline) const;

 private:
  int fd_ = -1;
};

}  // namespace epjit::comm
