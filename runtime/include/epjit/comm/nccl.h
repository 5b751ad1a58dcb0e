// NCCL (NVIDIA) or RCCL (AMD), the same C API, loaded with dlopen so that
// nothing links it: EPJIT_NCCL_LIBRARY names the library, else libnccl.so.2
// on CUDA devices and librccl.so.1 on HIP ones. Used by the internode
// transport and by epjit-bench's baselines.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epjit/comm/communicator.h"
#include "epjit/device.h"

namespace epjit {

class NcclCommunicator {
 public:
  // Collective over `comm`: rank 0 makes an NCCL unique id, the bootstrap
  // carries it to every rank, and each joins an NCCL communicator of the
  // same ranks on comm's device.
  static std::unique_ptr<NcclCommunicator> create(Communicator& comm);
  // Adopts the caller's ncclComm_t (not destroyed here); its rank and size
  // must be comm's.
  static std::unique_ptr<NcclCommunicator> adopt(Communicator& comm, void* nccl_comm);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // One grouped round of byte sends and receives on `stream` (a CUstream or
  // hipStream_t, Stream::native_handle()); sends and receives to one peer are
  // matched in order.
  struct Transfer {
    int peer;
    void* data;
    size_t bytes;
  };
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, void* stream) const;
  const std::string& library() const;

  // Why the communicator failed (ncclCommGetAsyncError: a peer's connection
  // closed, a network error), or nothing while it works. Thread-safe.
  std::optional<std::string> async_error() const;
  // ncclCommAbort: its kernels stop waiting, so the streams they hold drain;
  // the communicator is unusable after (an adopted one too: its owner must
  // make a new one). Thread-safe; the second call does nothing.
  void abort();
  bool adopted() const;  // the caller's ncclComm_t (adopt), not one made here

 private:
  struct Impl;
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epjit
