#include "epjit/comm/nccl.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "../core/environment.h"
#include "epjit/error.h"

namespace epjit {

namespace {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
constexpr int kNcclInt8 = 0;
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;  // a nonblocking call still running: not an error

// The entry points, from the library torch or the toolkit ships.
struct NcclLibrary {
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*CommCount)(ncclComm_t, int*) = nullptr;
  ncclResult_t (*CommUserRank)(ncclComm_t, int*) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*Send)(const void*, size_t, int, int, ncclComm_t, void*) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, int, int, ncclComm_t, void*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  std::string path;

  void check(ncclResult_t result, const char* what) const {
    if (result != 0)
      throw Error(std::string("NCCL ") + what + " failed: " + GetErrorString(result), "success",
                  "check the NCCL/RCCL library (" + path + "), the GPUs, and NCCL_DEBUG=INFO's log");
  }

  // One load per library path for the process (the handle stays open).
  static const NcclLibrary& load(Vendor vendor) {
    const std::string path =
        environment_value("EPJIT_NCCL_LIBRARY").value_or(vendor == Vendor::Amd ? "librccl.so.1" : "libnccl.so.2");
    static std::mutex mutex;
    static std::map<std::string, NcclLibrary> loaded;
    std::lock_guard lock(mutex);
    if (auto found = loaded.find(path); found != loaded.end()) return found->second;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      throw Error("cannot load NCCL/RCCL (" + path + "): " + dlerror(),
                  "libnccl.so.2 (CUDA) or librccl.so.1 (HIP) on the library path",
                  "install NCCL/RCCL, or set EPJIT_NCCL_LIBRARY to one (torch ships libnccl.so.2)");
    NcclLibrary n;
    n.path = path;
    auto bind = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (!fn) throw Error(path + " has no " + name, "NCCL 2.x / RCCL", "point EPJIT_NCCL_LIBRARY at a complete library");
    };
    bind(n.GetUniqueId, "ncclGetUniqueId");
    bind(n.CommInitRank, "ncclCommInitRank");
    bind(n.CommDestroy, "ncclCommDestroy");
    bind(n.CommAbort, "ncclCommAbort");
    bind(n.CommGetAsyncError, "ncclCommGetAsyncError");
    bind(n.CommCount, "ncclCommCount");
    bind(n.CommUserRank, "ncclCommUserRank");
    bind(n.GroupStart, "ncclGroupStart");
    bind(n.GroupEnd, "ncclGroupEnd");
    bind(n.Send, "ncclSend");
    bind(n.Recv, "ncclRecv");
    bind(n.GetErrorString, "ncclGetErrorString");
    return loaded.emplace(path, n).first->second;
  }
};

Vendor vendor_of(const Communicator& comm) { return comm.device().vendor(); }

}  // namespace

struct NcclCommunicator::Impl {
  Impl(const NcclLibrary& library, ncclComm_t handle, bool made_here) : nccl(library), comm(handle), owned(made_here) {}
  const NcclLibrary& nccl;
  ncclComm_t comm = nullptr;
  bool owned = false;
  std::atomic<bool> aborted{false};
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  // An aborted communicator is already freed (ncclCommAbort frees it).
  if (impl_->owned && impl_->comm && !impl_->aborted) impl_->nccl.CommDestroy(impl_->comm);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& comm) {
  if (comm.device().kind() == "host")
    throw Error("an NCCL communicator on the host device", "a CUDA or HIP device",
                "use the host internode transport on host ranks (EPJIT_INTERNODE_TRANSPORT=host)");
  const NcclLibrary& nccl = NcclLibrary::load(vendor_of(comm));
  ncclUniqueId id{};
  if (comm.rank() == 0) nccl.check(nccl.GetUniqueId(&id), "unique id");
  const auto ids = comm.allgather(
      std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  if (ids[0].size() != sizeof id)
    throw Error("rank 0 sent an NCCL unique id of " + std::to_string(ids[0].size()) + " bytes",
                std::to_string(sizeof id), "run the same epjit build on every rank");
  std::memcpy(&id, ids[0].data(), sizeof id);
  auto impl = std::make_unique<Impl>(nccl, nullptr, true);
  nccl.check(nccl.CommInitRank(&impl->comm, comm.world_size(), id, comm.rank()), "communicator init");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl)));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::adopt(Communicator& comm, void* nccl_comm) {
  if (!nccl_comm) throw Error("adopting a null ncclComm_t", "the caller's NCCL communicator", "pass a live ncclComm_t");
  const NcclLibrary& nccl = NcclLibrary::load(vendor_of(comm));
  auto handle = static_cast<ncclComm_t>(nccl_comm);
  int count = 0, rank = 0;
  nccl.check(nccl.CommCount(handle, &count), "comm count");
  nccl.check(nccl.CommUserRank(handle, &rank), "comm user rank");
  if (count != comm.world_size() || rank != comm.rank())
    throw Error("the adopted NCCL communicator is rank " + std::to_string(rank) + " of " + std::to_string(count),
                "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.world_size()) +
                    " (the epjit communicator's)",
                "pass an NCCL communicator of the same ranks in the same order");
  auto impl = std::make_unique<Impl>(nccl, handle, false);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl)));
}

std::optional<std::string> NcclCommunicator::async_error() const {
  if (impl_->aborted) return "the communicator was aborted";
  ncclResult_t state = kNcclSuccess;
  const ncclResult_t result = impl_->nccl.CommGetAsyncError(impl_->comm, &state);
  if (result != kNcclSuccess) return std::string("ncclCommGetAsyncError failed: ") + impl_->nccl.GetErrorString(result);
  if (state == kNcclSuccess || state == kNcclInProgress) return std::nullopt;
  return std::string(impl_->nccl.GetErrorString(state));
}

void NcclCommunicator::abort() {
  if (impl_->aborted.exchange(true)) return;
  impl_->nccl.CommAbort(impl_->comm);
}

bool NcclCommunicator::adopted() const { return !impl_->owned; }

void NcclCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                                void* stream) const {
  if (impl_->aborted)
    throw Error("a transfer on an aborted NCCL communicator", "a live communicator",
                "reset() the op on every rank (it makes a new one), or build a new op");
  const NcclLibrary& n = impl_->nccl;
  n.check(n.GroupStart(), "group start");
  try {
    for (const Transfer& send : sends)
      if (send.bytes) n.check(n.Send(send.data, send.bytes, kNcclInt8, send.peer, impl_->comm, stream), "send");
    for (const Transfer& receive : receives)
      if (receive.bytes)
        n.check(n.Recv(receive.data, receive.bytes, kNcclInt8, receive.peer, impl_->comm, stream), "recv");
  } catch (...) {
    n.GroupEnd();
    throw;
  }
  n.check(n.GroupEnd(), "group end");
}

const std::string& NcclCommunicator::library() const { return impl_->nccl.path; }

}  // namespace epjit
