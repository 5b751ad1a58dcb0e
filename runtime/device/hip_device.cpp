// The HIP device, on the HIP runtime API through the dlopen'd symbol table.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "epjit/device.h"
#include "epjit/error.h"
#include "driver_error_advice.h"
#include "gpu_drivers.h"
#include "gpu_device.h"
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
  // The library is named: a runtime that loads where no AMD GPU is (Debian's
  // libamdhip64 on a CPU or NVIDIA machine) fails here, not at the load.
  throw Error(std::string("HIP ") + what + " failed in " + hip_driver().library.path() + ": " +
                  (text ? text : "unknown error") + " (" + std::to_string(status) + ")",
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
  static hipError_t stream_wait_event(Stream stream, Event event) {
    return hip_driver().hipStreamWaitEvent(stream, event, 0);
  }
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
  static hipError_t begin_capture(Stream stream, int mode) { return hip_driver().hipStreamBeginCapture(stream, mode); }
  static hipError_t end_capture(Stream stream, Graph* graph) { return hip_driver().hipStreamEndCapture(stream, graph); }
  static hipError_t instantiate_graph(GraphExec* exec, Graph graph) {
    return hip_driver().hipGraphInstantiate(exec, graph, nullptr, nullptr, 0);
  }
  static RelaxedCaptureMode::Exchange capture_mode_exchange() {
    return hip_driver().hipThreadExchangeStreamCaptureMode;
  }

  static hipError_t allocate(void** pointer, size_t bytes) { return hip_driver().hipMalloc(pointer, bytes); }
  static hipError_t free(void* pointer) { return hip_driver().hipFree(pointer); }
  static hipError_t synchronize_device() { return hip_driver().hipDeviceSynchronize(); }
  static hipError_t copy_to_device(void* device, const void* host, size_t bytes) {
    return hip_driver().hipMemcpy(device, host, bytes, kHipMemcpyHostToDevice);
  }
  static hipError_t copy_to_host(void* host, const void* device, size_t bytes) {
    return hip_driver().hipMemcpy(host, device, bytes, kHipMemcpyDeviceToHost);
  }
  static hipError_t fill(void* device, uint8_t value, size_t bytes) {
    return hip_driver().hipMemset(device, value, bytes);
  }
  static hipError_t copy_on_device_async(void* dst, const void* src, size_t bytes, Stream stream) {
    return hip_driver().hipMemcpyAsync(dst, src, bytes, kHipMemcpyDeviceToDevice, stream);
  }
  static hipError_t copy_to_device_async(void* device, const void* host, size_t bytes, Stream stream) {
    return hip_driver().hipMemcpyAsync(device, host, bytes, kHipMemcpyHostToDevice, stream);
  }
  static hipError_t copy_to_host_async(void* host, const void* device, size_t bytes, Stream stream) {
    return hip_driver().hipMemcpyAsync(host, device, bytes, kHipMemcpyDeviceToHost, stream);
  }
  static hipError_t fill_async(void* device, uint8_t value, size_t bytes, Stream stream) {
    return hip_driver().hipMemsetAsync(device, value, bytes, stream);
  }

  using IpcHandle = hipIpcMemHandle_t;
  static hipError_t export_ipc(IpcHandle* handle, void* pointer) {
    return hip_driver().hipIpcGetMemHandle(handle, pointer);
  }
  static hipError_t import_ipc(void** pointer, const IpcHandle& handle) {
    return hip_driver().hipIpcOpenMemHandle(pointer, handle, 1 /*lazy peer access*/);
  }
  static hipError_t close_ipc(void* pointer) { return hip_driver().hipIpcCloseMemHandle(pointer); }
};

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

class HipDevice final : public GpuDevice<HipApi> {
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

 private:
  HipArchitecture architecture_{};
};

}  // namespace

std::unique_ptr<Device> make_hip_device(int ordinal) { return std::make_unique<HipDevice>(ordinal); }

}  // namespace epjit
