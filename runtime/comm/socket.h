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

  // A listening TCP socket on address:0 (an ephemeral port), non-blocking.
  static Socket listen_tcp(const std::string& address, uint16_t& port);
  static Socket connect_tcp(const std::string& address, uint16_t port, Clock::time_point deadline);
  Socket accept(Clock::time_point deadline) const;
  // An accepted connection if one is waiting (non-blocking), else an empty Socket.
  Socket try_accept() const;
  void set_nonblocking() const;

  // The frames the peer sent so far, read without blocking; `closed` is set
  // when the peer closed its end (or the connection broke). A frame longer
  // than `limit` is an epjit::Error naming `what`.
  std::vector<std::vector<uint8_t>> read_available(size_t limit, bool& closed, const std::string& what);

  // [u32 length][bytes]: a message as it goes on the wire.
  static std::vector<uint8_t> frame(const std::vector<uint8_t>& message);
  // Sends what the socket takes now without blocking; returns the bytes
  // sent (0 when its buffer is full). `broken` is set when the peer is gone.
  size_t send_available(const uint8_t* data, size_t size, bool& broken) const;

  // [u32 length][bytes]. `what` names the peer in errors.
  void send_message(const std::vector<uint8_t>& message, const std::string& what) const;
  std::vector<uint8_t> receive_message(Clock::time_point deadline, const std::string& what) const;
  // Whether a message (or the peer's close) is waiting.
  bool readable(Clock::time_point deadline) const;
  // Waits for the peer to close its end, discarding what it still sends;
  // false when `deadline` passed first.
  bool wait_closed(Clock::time_point deadline);

  // Unix sockets in the abstract namespace, for passing fds between processes.
  static Socket listen_unix(const std::string& name);
  static Socket connect_unix(const std::string& name, Clock::time_point deadline);
  // One fd with a small message (at most kMaxFdMessage bytes).
  void send_fd(int fd, const std::vector<uint8_t>& message) const;
  int receive_fd(std::vector<uint8_t>& message, Clock::time_point deadline) const;
  static constexpr size_t kMaxFdMessage = 128;
  // The connected peer's user id (SO_PEERCRED on Unix sockets); -1 when unknown.
  long peer_uid() const;

 private:
  int fd_ = -1;
  std::vector<uint8_t> pending_;  // bytes of a frame not yet complete (read_available)
};

}  // namespace epjit::comm
