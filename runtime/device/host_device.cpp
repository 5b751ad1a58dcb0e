// The host device: generated kernels compiled by the host toolchain into a
// shared object, launched as one CPU thread per warp (the kernel's lane work
// is already loops), blocks of warps sharing a barrier, and streams as
// ordered queues served by one thread each.
#include <algorithm>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "epjit/device.h"
#include "epjit/error.h"
#include "epjit/logging.h"
#include "epjit/targets/host/prelude.h"

namespace epjit {
namespace {

using HostEntry = void (*)(void** args, const host::WarpContext* warp);

class HostModule final : public Module {
 public:
  explicit HostModule(const std::vector<uint8_t>& binary) {
    const std::string path = stage(binary);
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    const char* why = handle_ ? nullptr : dlerror();
    if (path.rfind("/proc/", 0) != 0) ::unlink(path.c_str());  // the mapping outlives the name
    if (!handle_) {
      if (fd_ >= 0) ::close(fd_);
      throw Error(std::string("the host kernel module does not load: ") + (why ? why : "?"),
                  "a shared object built by the host toolchain", "clear the cache entry (epjit-cache rm KEY)");
    }
  }
  ~HostModule() override {
    if (handle_) dlclose(handle_);
    if (fd_ >= 0) ::close(fd_);
  }

  // dlopen needs a file, and returns an already loaded object whose name
  // matches, so every module gets a name never used before in any process
  // (pid and sequence): a file in the temporary directory, unlinked once
  // loaded, or where that cannot be written, a memfd under /proc/<pid>/fd.
  std::string stage(const std::vector<uint8_t>& binary) {
    static std::atomic<uint64_t> sequence{0};
    const char* tmp = std::getenv("TMPDIR");
    const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/epjit-kernel-" + std::to_string(getpid()) +
                             "-" + std::to_string(sequence++) + ".so";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (fd >= 0) {
      const bool written = ::write(fd, binary.data(), binary.size()) == ssize_t(binary.size());
      ::close(fd);
      if (written) return path;
      ::unlink(path.c_str());
    }
    static std::once_flag warned;
    std::call_once(warned, [&] {
      log().info("host kernel modules load from memfds ({} is not writable)", path.substr(0, path.rfind('/')));
    });
    fd_ = memfd_create("epjit-kernel", MFD_CLOEXEC);
    if (fd_ < 0 || ::write(fd_, binary.data(), binary.size()) != ssize_t(binary.size()))
      throw Error("cannot stage a host kernel module in memory", "memfd support", "run on Linux 3.17 or later");
    // A memfd's number is reused after close, but its fd keeps it unique while the module lives.
    return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_);
  }

  Kernel kernel(std::string_view name) override {
    const std::string symbol = std::string(name) + "__epjit_host_entry";
    void* entry = dlsym(handle_, symbol.c_str());
    if (!entry) {
      throw Error("kernel '" + std::string(name) + "' is not in the host module (no " + symbol + ")",
                  "a kernel the template defines", "check the kernel name (epjit-compile --template list)");
    }
    return {entry, std::string(name)};
  }

 private:
  int fd_ = -1;
  void* handle_ = nullptr;
};

// Tasks run in order on one thread; synchronize() waits for all before it.
class HostStream final : public Stream {
 public:
  HostStream() : worker_([this] { serve(); }) {}
  ~HostStream() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    worker_.join();
  }

  void enqueue(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
      ++submitted_;
    }
    ready_.notify_all();
  }

  // Waits for every task enqueued so far; a task that failed is reported
  // here (once), the way a GPU stream reports a failed launch.
  void synchronize() override {
    std::unique_lock lock(mutex_);
    const uint64_t target = submitted_;
    done_.wait(lock, [&] { return completed_ >= target; });
    if (failure_.empty()) return;
    const std::string failure = std::exchange(failure_, {});
    throw Error("a task on a host stream failed: " + failure, "host launches and copies that run",
                "fix what the message names (often a geometry the machine cannot run: fewer blocks or warps)");
  }

 private:
  // Nothing a task throws may leave this thread (it would end the process):
  // the first failure is kept for synchronize().
  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      std::string failure;
      try {
        task();
      } catch (const std::exception& error) {
        failure = error.what();
      } catch (...) {
        failure = "an unknown exception";
      }
      lock.lock();
      if (!failure.empty() && failure_.empty()) failure_ = std::move(failure);
      ++completed_;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::deque<std::function<void()>> tasks_;
  uint64_t submitted_ = 0, completed_ = 0;
  std::string failure_;
  bool stopping_ = false;
  std::thread worker_;
};

// Records are numbered: a wait or synchronize is for the record last made
// when it was called (as on GPUs), not for a later one.
class HostEvent final : public Event {
 public:
  explicit HostEvent(EventUse use) : Event(use) {}
  void record(Stream& stream) override {
    uint64_t record;
    {
      std::lock_guard lock(state_->mutex);
      record = ++state_->recorded;
    }
    static_cast<HostStream&>(stream).enqueue([state = state_, record] {
      std::lock_guard lock(state->mutex);
      state->time = std::chrono::steady_clock::now();
      state->passed = std::max(state->passed, record);
      state->cv.notify_all();
    });
  }
  void enqueue_wait(Stream& stream) override {
    uint64_t record;
    {
      std::lock_guard lock(state_->mutex);
      record = state_->recorded;
    }
    static_cast<HostStream&>(stream).enqueue([state = state_, record] { state->wait_for(record); });
  }
  void synchronize() override {
    uint64_t record;
    {
      std::lock_guard lock(state_->mutex);
      record = state_->recorded;
    }
    state_->wait_for(record);
  }
  bool completed() override {
    std::lock_guard lock(state_->mutex);
    return state_->passed >= state_->recorded;
  }
  float measured_ms(const Event& start) const override {
    const auto& other = static_cast<const HostEvent&>(start);
    return std::chrono::duration<float, std::milli>(state_->time - other.state_->time).count();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    uint64_t recorded = 0, passed = 0;  // records made, and the last one its stream passed
    std::chrono::steady_clock::time_point time = std::chrono::steady_clock::now();
    void wait_for(uint64_t record) {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return passed >= record; });
    }
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class HostDevice final : public Device {
 public:
  std::string_view kind() const override { return "host"; }
  Vendor vendor() const override { return Vendor::Cpu; }
  std::string default_target() const override { return "host"; }
  // A warp is a CPU thread running lane loops of any width: the default target's.
  int wave_size() const override { return find_target("host")->wave_size; }
  bool host_addressable() const override { return true; }
  SharingMethod sharing() const override { return SharingMethod::FileDescriptor; }

  void* allocate(size_t bytes) override {
    void* pointer = std::aligned_alloc(64, ((bytes + 63) / 64) * 64 + 64);
    if (!pointer) throw Error("host allocation of " + std::to_string(bytes) + " bytes failed", "free memory", "use smaller buffers");
    return pointer;
  }
  void release(void* pointer) override { std::free(pointer); }
  void copy_to_device(void* device, const void* host, size_t bytes) override { std::memcpy(device, host, bytes); }
  void copy_to_host(void* host, const void* device, size_t bytes) override { std::memcpy(host, device, bytes); }
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    static_cast<HostStream&>(stream).enqueue([=] { std::memcpy(dst, src, bytes); });
  }
  void fill_zero(void* device, size_t bytes) override { std::memset(device, 0, bytes); }
  // After the stream's tasks, on this thread (a failed task is reported here).
  void copy_to_device(void* device, const void* host, size_t bytes, Stream& stream) override {
    stream.synchronize();
    std::memcpy(device, host, bytes);
  }
  void copy_to_host(void* host, const void* device, size_t bytes, Stream& stream) override {
    stream.synchronize();
    std::memcpy(host, device, bytes);
  }
  void fill_bytes(void* device, uint8_t value, size_t bytes, Stream& stream) override {
    stream.synchronize();
    std::memset(device, value, bytes);
  }

  std::unique_ptr<Module> load_module(const std::vector<uint8_t>& binary) override {
    return std::make_unique<HostModule>(binary);
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<HostStream>(); }
  std::unique_ptr<Stream> wrap_stream(void*) override {
    throw Error("wrap_stream on the host device", "a GPU device (host streams are epjit's own)",
                "let the op use its own stream on the host");
  }
  std::unique_ptr<Event> create_event(EventUse use) override { return std::make_unique<HostEvent>(use); }

  // Every warp of a launch is its own thread, so every block is resident as
  // long as the threads exist: a launch has at most kMaxWarpThreads warps.
  uint32_t resident_blocks(const Kernel&, uint32_t warps_per_block) override {
    return warps_per_block == 0 || warps_per_block > kMaxWarpThreads ? 0 : kMaxWarpThreads / warps_per_block;
  }
  void launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args, Stream& stream) override {
    check_launch(kernel, geometry, args);
    if (uint64_t(geometry.blocks) * geometry.warps_per_block > kMaxWarpThreads)
      throw Error(kernel.name + " launched with " + std::to_string(geometry.blocks) + " blocks of " +
                      std::to_string(geometry.warps_per_block) + " warps on the host device",
                  "at most " + std::to_string(kMaxWarpThreads) + " warps per launch (one thread each)",
                  "launch fewer blocks or warps (the op fits its schedule to this limit by itself)");
    const auto entry = reinterpret_cast<HostEntry>(kernel.handle);
    static_cast<HostStream&>(stream).enqueue([entry, geometry, args] {
      std::vector<void*> values = args.pointers();
      run_grid(entry, geometry, values.data());
    });
  }

  void synchronize() override {}  // every host stream is synchronized by its owner

  bool supports_graphs() const override { return false; }
  void begin_capture(Stream&) override { throw no_graphs(); }
  std::unique_ptr<Graph> end_capture(Stream&) override { throw no_graphs(); }

  // memfds start zero-filled.
  ShareableMemory allocate_shareable(size_t bytes) override {
    ShareableMemory memory;
    memory.bytes = bytes;
    memory.fd = memfd_create("epjit-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    // Sealed at its size: no process that maps it can shrink it under a peer
    // (a read past the end of a shrunk memfd is a SIGBUS).
    if (memory.fd < 0 || ftruncate(memory.fd, off_t(bytes)) != 0 ||
        fcntl(memory.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      throw Error("cannot create " + std::to_string(bytes) + " bytes of shareable host memory: " + std::strerror(errno),
                  "memfd support and free memory", "run on Linux 3.17 or later with enough memory");
    }
    memory.pointer = map(memory.fd, bytes);
    return memory;
  }
  // A peer's memory is mapped only when it is a memfd sealed against
  // shrinking that holds at least the agreed size.
  void* open_shareable(const ShareableMemory& exported) override {
    struct stat status {};
    const int seals = fcntl(exported.fd, F_GET_SEALS);
    if (fstat(exported.fd, &status) != 0 || seals < 0 || !(seals & F_SEAL_SHRINK) ||
        uint64_t(status.st_size) < uint64_t(exported.bytes))
      throw Error("a peer's shared memory is " + std::to_string(status.st_size) + " bytes" +
                      (seals < 0 || !(seals & F_SEAL_SHRINK) ? " and not sealed against shrinking" : ""),
                  "a sealed memfd of at least " + std::to_string(exported.bytes) + " bytes",
                  "check that only epjit ranks of this group connect to this rank");
    return map(exported.fd, exported.bytes);
  }
  void close_shareable(void* pointer, size_t bytes) override { munmap(pointer, bytes); }
  void free_shareable(void* pointer, size_t bytes) override { munmap(pointer, bytes); }  // the memfd goes with its last mapping

 private:
  static Error no_graphs() {
    return Error("the host device has no graph capture", "a device with graphs (cuda or hip)",
                 "launch eagerly on the host device; graph mode runs on GPUs");
  }

  static void* map(int fd, size_t bytes) {
    void* pointer = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (pointer == MAP_FAILED)
      throw Error(std::string("mapping shareable host memory failed: ") + std::strerror(errno), "a valid memfd",
                  "check the fd passed between processes");
    return pointer;
  }

  // One thread per warp; the warps of a block share a barrier. The warps
  // start together once every thread exists: if the machine refuses a thread,
  // none has run (a partial grid would wait forever at its barriers or
  // meetings), the started ones leave, and the failure is the launch's.
  static void run_grid(HostEntry entry, LaunchGeometry geometry, void** args) {
    std::vector<std::unique_ptr<std::barrier<>>> barriers;
    for (uint32_t b = 0; b < geometry.blocks; ++b)
      barriers.push_back(std::make_unique<std::barrier<>>(geometry.warps_per_block));
    std::vector<int32_t> block_votes(geometry.blocks, 0);
    enum class Gate { Closed, Run, Abandon };
    std::mutex gate_mutex;
    std::condition_variable gate_opened;
    Gate gate = Gate::Closed;
    const auto open_gate = [&](Gate to) {
      {
        std::lock_guard lock(gate_mutex);
        gate = to;
      }
      gate_opened.notify_all();
    };
    std::vector<std::thread> warps;
    warps.reserve(size_t(geometry.blocks) * geometry.warps_per_block);
    std::string refused;
    try {
      for (uint32_t b = 0; b < geometry.blocks; ++b) {
        for (uint32_t w = 0; w < geometry.warps_per_block; ++w) {
          warps.emplace_back([=, &barriers, &block_votes, &gate_mutex, &gate_opened, &gate] {
            {
              std::unique_lock lock(gate_mutex);
              gate_opened.wait(lock, [&] { return gate != Gate::Closed; });
              if (gate == Gate::Abandon) return;
            }
            const host::WarpContext context{b, geometry.blocks, w, geometry.warps_per_block, barriers[b].get(),
                                            [](void* barrier) { static_cast<std::barrier<>*>(barrier)->arrive_and_wait(); },
                                            &block_votes[b]};
            entry(args, &context);
          });
        }
      }
    } catch (const std::system_error& error) {
      refused = error.what();
    }
    open_gate(refused.empty() ? Gate::Run : Gate::Abandon);
    for (std::thread& warp : warps) warp.join();
    if (!refused.empty())
      throw Error("the host device could not start " + std::to_string(size_t(geometry.blocks) * geometry.warps_per_block) +
                      " warp threads (" + std::to_string(warps.size()) + " started: " + refused + ")",
                  "a grid whose warps the machine can run as threads", "launch fewer blocks or warps, or raise ulimit -u");
  }

  static constexpr uint32_t kMaxWarpThreads = 4096;
};

}  // namespace

std::unique_ptr<Device> make_host_device() { return std::make_unique<HostDevice>(); }

}  // namespace epjit
