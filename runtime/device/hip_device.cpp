// The HIP device, on the HIP runtime API through the dlopen'd symbol table.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "epjit/device.h"
#include "epjit/error.h"
#include "driver_error_advice.h"
#include "gpu_drivers.h"
#include "gpu_objects.h"
#include "relaxed_capture_mode.h"
#include "hip_properties.h"

namespace epjit {
namespace {

using namespace drivers;

constexpr int kHipMemcpyHostToDevice = 1;
constexpr int kHipMemcpyDeviceToHost = 2;
constexpr int kHipMemcpyDeviceToDevice = 3;

void check(hipError_t status, const std::string& what) {
  if (status == 0) return;
  const char* text = hip_driver().hipGetErrorString(status);
  const DriverErrorAdvice advice = driver_error_advice(int(status), "AMD GPU", "rocm-smi", "HIP_VISIBLE_DEVICES");
  throw Error(std::string("HIP ") + what + " failed: " + (text ? text : "unknown error") + " (" +
                  std::to_string(status) + ")",
              advice.expected, advice.fix);
}

// The HIP runtime's calls as gpu_objects.h names them. HIP keeps the
// current device per thread and needs no context made current.
struct HipApi {
  struct Context {};
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  using Module = hipModule_t;
  using Function = hipFunction_t;
  using Graph = hipGraph_t;
  using GraphExec = hipGraphExec_t;
  static constexpr const char* kName = "HIP";
  static constexpr const char* kModuleLoad = "hipModuleLoadData";
  static void check(hipError_t status, const std::string& what) { epjit::check(status, what); }
  static void make_current(Context) {}
  static hipError_t create_stream(Stream* stream) { return hip_driver().hipStreamCreate(stream); }
  static hipError_t destroy_stream(Stream stream) { return hip_driver().hipStreamDestroy(stream); }
  static hipError_t synchronize_stream(Stream stream) { return hip_driver().hipStreamSynchronize(stream); }
  static hipError_t stream_capture_status(Stream stream, int* status) {
    return hip_driver().hipStreamIsCapturing(stream, status);
  }
  static hipError_t create_event(Event* event, unsigned flags) {
    return hip_driver().hipEventCreateWithFlags(event, flags);
  }
  static hipError_t destroy_event(Event event) { return hip_driver().hipEventDestroy(event); }
  static hipError_t record_event(Event event, Stream stream) { return hip_driver().hipEventRecord(event, stream); }
  static hipError_t synchronize_event(Event event) { return hip_driver().hipEventSynchronize(event); }
  static hipError_t query_event(Event event) { return hip_driver().hipEventQuery(event); }
  static hipError_t elapsed_ms(float* ms, Event start, Event end) {
    return hip_driver().hipEventElapsedTime(ms, start, end);
  }
  static hipError_t load_module(Module* module, const void* image) {
    return hip_driver().hipModuleLoadData(module, image);
  }
  static hipError_t unload_module(Module module) { return hip_driver().hipModuleUnload(module); }
  static hipError_t module_function(Function* function, Module module, const char* name) {
    return hip_driver().hipModuleGetFunction(function, module, name);
  }
  static hipError_t destroy_graph_exec(GraphExec exec) { return hip_driver().hipGraphExecDestroy(exec); }
  static hipError_t destroy_graph(Graph graph) { return hip_driver().hipGraphDestroy(graph); }
  static hipError_t launch_graph(GraphExec exec, Stream stream) { return hip_driver().hipGraphLaunch(exec, stream); }
};
using HipStream = GpuStream<HipApi>;
using HipEvent = GpuEvent<HipApi>;
using HipModule = GpuModule<HipApi>;
using HipGraph = GpuGraph<HipApi>;

// The device's gcnArchName and warp size, read through whichever properties
// layout the loaded HIP exports. A name that is not "gfx..." or a warp size
// that is not 32 or 64 means the layout was misread: an error, never a guess.
HipArchitecture read_architecture(int ordinal) {
  const HipDriver& hip = hip_driver();
  // Larger than either layout (hip_properties.h): HIP writes its whole struct.
  std::vector<std::max_align_t> buffer(16384 / sizeof(std::max_align_t));
  check(hip.hipGetDeviceProperties(buffer.data(), ordinal), "device properties");
  HipArchitecture architecture{};
  const char* name = nullptr;
  if (hip.properties_r0600) {
    const auto* props = reinterpret_cast<const HipDevicePropR0600*>(buffer.data());
    name = props->gcnArchName;
    architecture.warp_size = props->warpSize;
    architecture.compute_units = props->multiProcessorCount;
  } else {
    const auto* props = reinterpret_cast<const HipDevicePropR0000*>(buffer.data());
    name = props->gcnArchName;
    architecture.warp_size = props->warpSize;
    architecture.compute_units = props->multiProcessorCount;
  }
  const size_t length = strnlen(name, sizeof architecture.gcn_arch_name);
  const bool plausible = length > 3 && length < sizeof architecture.gcn_arch_name && std::strncmp(name, "gfx", 3) == 0 &&
                         (architecture.warp_size == 32 || architecture.warp_size == 64) &&
                         architecture.compute_units > 0;
  if (!plausible)
    throw Error("the HIP runtime's device properties do not hold a gfx architecture, a warp size of 32 or 64 and a "
                "compute unit count",
                "a HIP runtime whose hipDeviceProp_t epjit knows (ROCm 5 or 6 layouts)",
                "set EPJIT_TARGET to the GPU's architecture (rocminfo shows it), or report the ROCm version");
  std::memcpy(architecture.gcn_arch_name, name, length);
  return architecture;
}

class HipDevice final : public Device {
 public:
  explicit HipDevice(int ordinal) {
    const HipDriver& hip = hip_driver();
    check(hip.hipInit(0), "initialization (hipInit)");
    int count = 0;
    check(hip.hipGetDeviceCount(&count), "device count");
    if (ordinal < 0 || ordinal >= count) {
      throw Error("HIP device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) + " visible)",
                  "an ordinal in [0, " + std::to_string(count) + ")", "pick a visible device or set HIP_VISIBLE_DEVICES");
    }
    check(hip.hipSetDevice(ordinal), "device selection");
    architecture_ = read_architecture(ordinal);
  }

  std::string_view kind() const override { return "hip"; }
  Vendor vendor() const override { return Vendor::Amd; }
  std::string default_target() const override {
    if (const TargetInfo* target = target_for_amd_arch(architecture_.gcn_arch_name)) return std::string(target->name);
    throw Error("this AMD GPU is " + std::string(architecture_.gcn_arch_name) + ", for which epjit has no target",
                "a GPU epjit has a target for: " + device_targets_of(Vendor::Amd),
                "run on such a GPU (HIP_VISIBLE_DEVICES selects one), or use the host device");
  }
  int wave_size() const override { return architecture_.warp_size; }
  bool host_addressable() const override { return false; }
  SharingMethod sharing() const override { return SharingMethod::IpcHandle; }

  void* allocate(size_t bytes) override {
    void* pointer = nullptr;
    check(hip_driver().hipMalloc(&pointer, bytes), "allocation");
    return pointer;
  }
  // Frees never belong to a graph: exempt from a framework's global capture
  // (see the CUDA device).
  void release(void* pointer) override {
    if (!pointer) return;
    const RelaxedCaptureMode exemption(hip_driver().hipThreadExchangeStreamCaptureMode);
    hip_driver().hipFree(pointer);
  }
  // Copies are complete when they return (see the CUDA device: pageable
  // copies may return before their DMA lands).
  void copy_to_device(void* device, const void* host, size_t bytes) override {
    check(hip_driver().hipMemcpy(device, host, bytes, kHipMemcpyHostToDevice), "copy to device");
    check(hip_driver().hipDeviceSynchronize(), "copy to device (completion)");
  }
  void copy_to_host(void* host, const void* device, size_t bytes) override {
    check(hip_driver().hipDeviceSynchronize(), "copy to host (pending work)");
    check(hip_driver().hipMemcpy(host, device, bytes, kHipMemcpyDeviceToHost), "copy to host");
  }
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    check(hip_driver().hipMemcpyAsync(dst, src, bytes, kHipMemcpyDeviceToDevice, native_stream<HipApi>(stream)),
          "device copy");
  }
  void fill_zero(void* device, size_t bytes) override {
    check(hip_driver().hipMemset(device, 0, bytes), "memset");
    check(hip_driver().hipDeviceSynchronize(), "memset (completion)");
  }
  // On the stream, then that stream's synchronize (see the CUDA device).
  void copy_to_device(void* device, const void* host, size_t bytes, Stream& stream) override {
    const hipStream_t handle = native_stream<HipApi>(stream);
    check(hip_driver().hipMemcpyAsync(device, host, bytes, kHipMemcpyHostToDevice, handle), "copy to device");
    check(hip_driver().hipStreamSynchronize(handle), "copy to device (completion)");
  }
  void copy_to_host(void* host, const void* device, size_t bytes, Stream& stream) override {
    const hipStream_t handle = native_stream<HipApi>(stream);
    check(hip_driver().hipMemcpyAsync(host, device, bytes, kHipMemcpyDeviceToHost, handle), "copy to host");
    check(hip_driver().hipStreamSynchronize(handle), "copy to host (completion)");
  }
  void fill_bytes(void* device, uint8_t value, size_t bytes, Stream& stream) override {
    const hipStream_t handle = native_stream<HipApi>(stream);
    check(hip_driver().hipMemsetAsync(device, value, bytes, handle), "memset");
    check(hip_driver().hipStreamSynchronize(handle), "memset (completion)");
  }
  std::unique_ptr<Module> load_module(const std::vector<uint8_t>& binary) override {
    return std::make_unique<HipModule>(binary);
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<HipStream>(HipApi::Context{}); }
  std::unique_ptr<Stream> wrap_stream(void* native) override {
    return std::make_unique<HipStream>(HipApi::Context{}, static_cast<hipStream_t>(native));
  }
  std::unique_ptr<Event> create_event(EventUse use) override {
    return std::make_unique<HipEvent>(HipApi::Context{}, use);
  }
  uint32_t resident_blocks(const Kernel& kernel, uint32_t warps_per_block) override {
    int per_compute_unit = 0;
    const int threads = int(block_threads(kernel, {1, warps_per_block}, wave_size()));
    check(hip_driver().hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(
              &per_compute_unit, static_cast<hipFunction_t>(kernel.handle), threads, 0),
          "occupancy query of " + kernel.name);
    return uint32_t(per_compute_unit) * uint32_t(architecture_.compute_units);
  }
  void launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args, Stream& stream) override {
    check_launch(kernel, geometry, args);
    std::vector<void*> values = args.pointers();
    check(hip_driver().hipModuleLaunchKernel(static_cast<hipFunction_t>(kernel.handle), geometry.blocks, 1, 1,
                                             block_threads(kernel, geometry, wave_size()), 1, 1, 0,
                                             native_stream<HipApi>(stream), values.data(), nullptr),
          "kernel launch");
  }
  void synchronize() override { check(hip_driver().hipDeviceSynchronize(), "device synchronize"); }

  bool supports_graphs() const override { return true; }
  void begin_capture(Stream& stream) override {
    check(hip_driver().hipStreamBeginCapture(native_stream<HipApi>(stream), kRelaxedCaptureMode),
          "stream capture begin");
  }
  std::unique_ptr<Graph> end_capture(Stream& stream) override {
    hipGraph_t graph = nullptr;
    check(hip_driver().hipStreamEndCapture(native_stream<HipApi>(stream), &graph), "stream capture end");
    hipGraphExec_t exec = nullptr;
    check(hip_driver().hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "graph instantiation");
    return std::make_unique<HipGraph>(graph, exec);
  }
  std::unique_ptr<CaptureExemption> exempt_from_capture() override {
    return std::make_unique<RelaxedCaptureMode>(hip_driver().hipThreadExchangeStreamCaptureMode, check);
  }

  ShareableMemory allocate_shareable(size_t bytes) override {
    ShareableMemory memory;
    memory.bytes = bytes;
    memory.pointer = allocate(bytes);
    fill_zero(memory.pointer, bytes);
    hipIpcMemHandle_t handle;
    check(hip_driver().hipIpcGetMemHandle(&handle, memory.pointer), "IPC handle export");
    memory.ipc_handle.assign(reinterpret_cast<uint8_t*>(&handle), reinterpret_cast<uint8_t*>(&handle) + sizeof handle);
    return memory;
  }
  void* open_shareable(const ShareableMemory& exported) override {
    hipIpcMemHandle_t handle;
    if (exported.ipc_handle.size() != sizeof handle)
      throw Error("a HIP IPC handle has " + std::to_string(exported.ipc_handle.size()) + " bytes", "64 bytes",
                  "pass the handle exported by allocate_shareable unchanged");
    std::memcpy(&handle, exported.ipc_handle.data(), sizeof handle);
    void* pointer = nullptr;
    check(hip_driver().hipIpcOpenMemHandle(&pointer, handle, 1), "IPC handle import");
    return pointer;
  }
  void close_shareable(void* pointer, size_t) override {
    const RelaxedCaptureMode exemption(hip_driver().hipThreadExchangeStreamCaptureMode);  // as release()
    hip_driver().hipIpcCloseMemHandle(pointer);
  }
  void free_shareable(void* pointer, size_t) override { release(pointer); }

 private:
  HipArchitecture architecture_{};
};

}  // namespace

std::unique_ptr<Device> make_hip_device(int ordinal) { return std::make_unique<HipDevice>(ordinal); }

}  // namespace epjit
