// Devices: memory, streams, events, module load and kernel launch, shareable
// memory, and graph capture where the platform has it. Host (generated
// kernels from the host toolchain's .so, one CPU thread per warp), CUDA
// (driver API through dlopen of libcuda.so.1) and HIP (dlopen of
// libamdhip64.so). Ownership is explicit: modules own their kernels, streams
// and events belong to their device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "epjit/error.h"
#include "epjit/kernel_interface.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit {

class Stream {
 public:
  virtual ~Stream() = default;
  virtual void synchronize() = 0;
  // CUstream / hipStream_t, for libraries that take one (NCCL); null on the host.
  virtual void* native_handle() const { return nullptr; }
  // Whether work enqueued now is recorded into a graph (by epjit's
  // begin_capture or a framework's) rather than run: host-side steps that
  // must wait for the stream cannot be part of such a sequence.
  virtual bool capturing() const { return false; }
};

// What an event is for. Timing events carry a timestamp (elapsed_ms); events
// that only mark completion (a host waiting for or polling a point of the
// stream) are recorded without one, which the drivers do more cheaply.
enum class EventUse { timing, completion };

class Event {
 public:
  explicit Event(EventUse use) : use_(use) {}
  virtual ~Event() = default;
  EventUse use() const { return use_; }
  virtual void record(Stream& stream) = 0;
  // Work enqueued on `stream` after this call starts once the stream this
  // event was last recorded on has passed that record (cuStreamWaitEvent);
  // the host does not wait. An event never recorded makes it wait for nothing.
  virtual void enqueue_wait(Stream& stream) = 0;
  virtual void synchronize() = 0;
  // True once the stream has passed the recorded point (never blocks).
  virtual bool completed() = 0;
  // Milliseconds between two recorded events (both complete, both created
  // for EventUse::timing; otherwise an epjit::Error).
  float elapsed_ms(const Event& start) const;

 protected:
  // elapsed_ms between two timing events of this event's kind.
  virtual float measured_ms(const Event& start) const = 0;

 private:
  EventUse use_;
};

// While alive, the thread that made it may allocate, create streams and wait
// for streams that are not capturing, though a stream of the process is
// capturing a graph. A framework's capture (torch.cuda.graph) forbids those
// calls by default because a replay would not repeat them; memory and streams
// made this way outlive the graph and take no part in it. CUDA and HIP: the
// thread's relaxed capture mode, the one it had restored on destruction.
class CaptureExemption {
 public:
  virtual ~CaptureExemption() = default;
};

// A captured sequence of launches, replayed as one.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void launch(Stream& stream) = 0;
};

struct Kernel {
  void* handle = nullptr;  // CUfunction, hipFunction_t, or the host entry point
  std::string name;
  // From the module's interface record (KernelModule); a launch is checked
  // against it. Null for a kernel looked up in a bare Module. Valid while the
  // KernelModule that bound it lives.
  const KernelSignature* signature = nullptr;
  int wave_size = 0;  // the lanes per warp it was compiled for; 0: the device's
  // It waits at entry for the kernel before it on the stream (the interface
  // record's target.dependent_launch), so a device that can may launch it
  // before that kernel ends. False for a bare Module's kernels.
  bool dependent_launch = false;
};

class Module {
 public:
  virtual ~Module() = default;
  // Throws epjit::Error naming the kernel and the module when absent.
  virtual Kernel kernel(std::string_view name) = 0;
};

// The argument values of one launch, copied in, so a launch never depends on
// the caller's variables staying alive (the host device runs launches later,
// on its stream's thread). Add values in the kernel's parameter order, or let
// LaunchArgs (kernel_module.h) order them by name; a launch checks them
// against the kernel's signature when it has one.
class KernelArgs {
 public:
  enum class Kind : uint8_t { Pointer, Integer, Float, Other };
  struct Slot {
    Kind kind;
    size_t bytes;
  };

  template <typename T>
  KernelArgs& add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= alignof(std::max_align_t));
    const size_t offset = (storage_.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    storage_.resize(offset + sizeof(T));
    std::memcpy(storage_.data() + offset, &value, sizeof(T));
    offsets_.push_back(offset);
    constexpr Kind kind = std::is_pointer_v<T> || std::is_null_pointer_v<T> ? Kind::Pointer
                          : std::is_integral_v<T>                           ? Kind::Integer
                          : std::is_floating_point_v<T>                     ? Kind::Float
                                                                            : Kind::Other;
    slots_.push_back({kind, sizeof(T)});
    return *this;
  }
  // Room for `count` values of `bytes` in all (alignment included), so
  // adding them allocates once.
  void reserve(size_t count, size_t bytes) {
    storage_.reserve(bytes);
    offsets_.reserve(count);
    slots_.reserve(count);
  }
  size_t size() const { return offsets_.size(); }
  const Slot& slot(size_t index) const { return slots_.at(index); }
  // Pointers to each value, as cuLaunchKernelEx/hipModuleLaunchKernel take them;
  // valid while this object is alive and unchanged. Drivers only read them.
  std::vector<void*> pointers() const {
    std::vector<void*> result;
    for (size_t offset : offsets_) result.push_back(const_cast<unsigned char*>(storage_.data()) + offset);
    return result;
  }

 private:
  // std::max_align_t-aligned storage for any argument type.
  struct alignas(std::max_align_t) Chunk {
    unsigned char bytes[alignof(std::max_align_t)];
  };
  class Storage {
   public:
    size_t size() const { return size_; }
    void resize(size_t bytes) {
      chunks_.resize(chunks_for(bytes));
      size_ = bytes;
    }
    void reserve(size_t bytes) { chunks_.reserve(chunks_for(bytes)); }
    unsigned char* data() { return chunks_.empty() ? nullptr : chunks_.front().bytes; }
    const unsigned char* data() const { return chunks_.empty() ? nullptr : chunks_.front().bytes; }

   private:
    static size_t chunks_for(size_t bytes) { return (bytes + sizeof(Chunk) - 1) / sizeof(Chunk); }
    std::vector<Chunk> chunks_;
    size_t size_ = 0;
  };
  Storage storage_;
  std::vector<size_t> offsets_;
  std::vector<Slot> slots_;
};

struct LaunchGeometry {
  uint32_t blocks = 1;
  uint32_t warps_per_block = 1;
};

// Memory another process can map: an fd (host, over SCM_RIGHTS) or an opaque
// IPC handle (CUDA/HIP, 64 bytes).
struct ShareableMemory {
  void* pointer = nullptr;
  size_t bytes = 0;
  int fd = -1;
  std::vector<uint8_t> ipc_handle;
};

// How allocate_shareable memory reaches another process.
enum class SharingMethod : uint8_t {
  FileDescriptor,  // an fd passed over a Unix socket (SCM_RIGHTS): the host device
  IpcHandle,       // an opaque handle any process of the node can open: CUDA, HIP
};

class Device {
 public:
  virtual ~Device() = default;
  // "host", "cuda", "hip": for messages; behaviour follows the capabilities below.
  virtual std::string_view kind() const = 0;
  // Whose code it runs: host targets on the host device, NVIDIA or AMD targets on GPUs.
  virtual Vendor vendor() const = 0;
  // The TargetInfo name of the target this device is (TargetInfo's lookup from
  // what the device reports); throws epjit::Error naming the targets that exist
  // when the device matches none.
  virtual std::string default_target() const = 0;
  // The lanes of a warp (wavefront) on this device, as the device reports it.
  virtual int wave_size() const = 0;
  // Whether the host may read and write this device's memory through plain pointers.
  virtual bool host_addressable() const = 0;
  virtual SharingMethod sharing() const = 0;

  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* pointer) = 0;
  // Blocking copies: complete (and ordered after all earlier work) on return.
  virtual void copy_to_device(void* device, const void* host, size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* device, size_t bytes) = 0;
  // Blocking, like the copies.
  virtual void fill_zero(void* device, size_t bytes) = 0;
  // The same, ordered after the earlier work of `stream` only and complete
  // on return: what an op reads back or writes between its calls must not
  // wait for the device's other streams (a framework's compute, its NCCL).
  virtual void copy_to_device(void* device, const void* host, size_t bytes, Stream& stream) = 0;
  virtual void copy_to_host(void* host, const void* device, size_t bytes, Stream& stream) = 0;
  // Every byte set to `value` (0xFF makes int32 words read -1).
  virtual void fill_bytes(void* device, uint8_t value, size_t bytes, Stream& stream) = 0;
  void fill_zero(void* device, size_t bytes, Stream& stream) { fill_bytes(device, 0, bytes, stream); }
  // Device to device, including a peer's memory mapped here; ordered on `stream`.
  virtual void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) = 0;

  virtual std::unique_ptr<Module> load_module(const std::vector<uint8_t>& binary) = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // A stream someone else owns (a framework's CUstream / hipStream_t), not
  // destroyed with the returned object. Throws on the host device.
  virtual std::unique_ptr<Stream> wrap_stream(void* native) = 0;
  virtual std::unique_ptr<Event> create_event(EventUse use) = 0;
  // How many blocks of `warps_per_block` warps of `kernel` the whole device
  // holds at once (blocks per SM/CU times their count). Kernels whose blocks
  // wait for each other (a cross-rank meeting) must not launch more.
  virtual uint32_t resident_blocks(const Kernel& kernel, uint32_t warps_per_block) = 0;
  // Whether launches of kernels that wait for their predecessor at entry
  // (Kernel::dependent_launch) overlap that predecessor's tail: CUDA, unless
  // EPJIT_DEPENDENT_LAUNCH=0. Results are the same either way.
  virtual bool overlaps_dependent_launches() const { return false; }
  // Enqueues a launch with a copy of the argument values.
  virtual void launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args, Stream& stream) = 0;
  virtual void synchronize() = 0;

  // Graph capture: launches enqueued on `stream` between begin and end are
  // recorded, not run. Throws epjit::Error where the platform has no graphs (host).
  virtual bool supports_graphs() const = 0;
  virtual void begin_capture(Stream& stream) = 0;
  virtual std::unique_ptr<Graph> end_capture(Stream& stream) = 0;
  // See CaptureExemption. Where nothing captures (the host), a no-op.
  virtual std::unique_ptr<CaptureExemption> exempt_from_capture() { return std::make_unique<CaptureExemption>(); }

  // Zero-filled memory another process of the node can map.
  virtual ShareableMemory allocate_shareable(size_t bytes) = 0;
  virtual void* open_shareable(const ShareableMemory& exported) = 0;
  // Unmaps a peer's memory this process opened.
  virtual void close_shareable(void* pointer, size_t bytes) = 0;
  // Frees memory this process allocated with allocate_shareable.
  virtual void free_shareable(void* pointer, size_t bytes) = 0;
};

// Each throws epjit::Error naming what was looked for when the driver is absent.
std::unique_ptr<Device> make_host_device();
std::unique_ptr<Device> make_cuda_device(int ordinal = 0);
std::unique_ptr<Device> make_hip_device(int ordinal = 0);
// "host", "cuda" or "hip"; throws epjit::Error naming them for anything else.
std::unique_ptr<Device> make_device(std::string_view kind, int ordinal = 0);

// What this host has of one GPU API ("cuda" or "hip"), read in a child
// process so that the driver is not initialized in this one (a process that
// forks rank processes must not have it): how many GPUs open (up to 8), the
// first one's target (Device::default_target), or, where none opens or the
// first has no target, the error that gave (carried over from the child).
struct GpuSurvey {
  int count = 0;
  std::string target;
  std::optional<Error> error;
};
// Throws epjit::Error for a kind other than "cuda" or "hip".
GpuSurvey survey_gpus(std::string_view kind);

// What every Device::launch checks before enqueuing: a non-empty grid, and,
// for a kernel with a signature, the block against its launch bound and every
// argument against its parameter (count, kind and size). Throws epjit::Error
// naming the kernel and the parameter.
void check_launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args);
// Threads per block of a launch: the kernel's compiled wave width, else the device's.
uint32_t block_threads(const Kernel& kernel, LaunchGeometry geometry, int device_wave_size);

}  // namespace epjit
