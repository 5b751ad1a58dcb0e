// An internode transport over an engine that enqueues transfers on the op's
// stream and never blocks the host (NCCL, RCCL), with a watcher thread that
// aborts the engine when a transfer fails (TransferWatch): a peer that died
// or stopped calling would otherwise leave the engine's kernels waiting, and
// every host wait on the stream with them.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "epjit/comm/communicator.h"
#include "internode_transport.h"

namespace epjit::ep {

class StreamTransferEngine {
 public:
  virtual ~StreamTransferEngine() = default;
  virtual std::string name() const = 0;
  // Enqueues one grouped round of sends and receives on `stream`.
  virtual void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                        Stream& stream) = 0;
  // Thread-safe, asked by the watcher: why the engine failed, or nothing.
  virtual std::optional<std::string> async_error() const = 0;
  // Thread-safe: stops the engine's waits so the stream drains; the engine
  // is unusable after. The second call does nothing.
  virtual void abort() = 0;
  // Collective over `comm`, after any rank's failure: a new engine of the
  // same ranks, or an epjit::Error when this one cannot be remade (the
  // caller's adopted NCCL communicator).
  virtual std::unique_ptr<StreamTransferEngine> remake(Communicator& comm) = 0;
};

// Transfers time out `peer_timeout` after they could start.
std::unique_ptr<InternodeTransport> make_watched_transport(Communicator& comm,
                                                           std::unique_ptr<StreamTransferEngine> engine,
                                                           std::chrono::milliseconds peer_timeout);

}  // namespace epjit::ep
