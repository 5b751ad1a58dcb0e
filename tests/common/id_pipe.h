// A unique id handed to rank processes forked before it existed. Ranks are
// forked before any thread starts (get_unique_id starts the bootstrap's): a
// fork copies only the forking thread, so a lock another thread held (the
// allocator's, under a sanitizer) would stay held in the child, and
// ThreadSanitizer refuses threads in a child of a threaded process.
#pragma once

#include <unistd.h>

#include <optional>
#include <stdexcept>

#include "epjit/comm/communicator.h"

namespace epjit::testing {

class IdPipe {
 public:
  IdPipe() {
    if (pipe(fds_) != 0) throw std::runtime_error("IdPipe: pipe() failed");
  }
  ~IdPipe() {
    close_reading();
    close_writing();
  }
  IdPipe(const IdPipe&) = delete;
  IdPipe& operator=(const IdPipe&) = delete;

  // One copy per reader; false if the pipe took less.
  bool send(const UniqueId& id, int readers = 1) {
    for (int i = 0; i < readers; ++i)
      if (write(fds_[1], id.bytes.data(), id.bytes.size()) != ssize_t(id.bytes.size())) return false;
    return true;
  }
  // Nothing if the writer ended (every copy of the write end closed) first.
  std::optional<UniqueId> receive() {
    UniqueId id;
    if (read(fds_[0], id.bytes.data(), id.bytes.size()) != ssize_t(id.bytes.size())) return std::nullopt;
    return id;
  }
  // A process that only reads closes its copy of the write end, so a writer
  // that dies before writing ends the read instead of leaving it waiting.
  void close_writing() { close_end(1); }
  void close_reading() { close_end(0); }

 private:
  void close_end(int end) {
    if (fds_[end] >= 0) close(fds_[end]);
    fds_[end] = -1;
  }
  int fds_[2] = {-1, -1};
};

}  // namespace epjit::testing
