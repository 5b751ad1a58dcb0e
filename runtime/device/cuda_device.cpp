// The CUDA device, on the driver API through the dlopen'd symbol table.
#include <cstdlib>
#include <cstring>

#include "epjit/device.h"
#include "../core/environment.h"
#include "epjit/error.h"
#include "driver_error_advice.h"
#include "gpu_drivers.h"
#include "gpu_device.h"

namespace epjit {
namespace {

using namespace drivers;

void check(CUresult status, const std::string& what) {
  if (status == 0) return;
  const char* text = nullptr;
  cuda_driver().cuGetErrorString(status, &text);
  const DriverErrorAdvice advice =
      driver_error_advice(int(status), "CUDA device", "nvidia-smi", "CUDA_VISIBLE_DEVICES");
  throw Error(std::string("CUDA ") + what + " failed: " + (text ? text : "unknown error") + " (" +
                  std::to_string(status) + ")",
              advice.expected, advice.fix);
}

// EPJIT_DEPENDENT_LAUNCH: 1 (the default) launches kernels that wait for their
// predecessor at entry before it ends; 0 launches every kernel after the one
// before it, to measure what the overlap is worth or to rule it out.
bool dependent_launch_enabled() {
  return environment_switch("EPJIT_DEPENDENT_LAUNCH", true, "launch every kernel only after the one before it ends");
}

// The CUDA driver's calls as gpu_objects.h names them.
struct CudaApi {
  using Context = CUcontext;
  using Stream = CUstream;
  using Event = CUevent;
  using Module = CUmodule;
  using Function = CUfunction;
  using Graph = CUgraph;
  using GraphExec = CUgraphExec;
  static constexpr const char* kName = "CUDA";
  static constexpr const char* kModuleLoad = "cuModuleLoadData";
  static void check(CUresult status, const std::string& what) { epjit::check(status, what); }
  static void make_current(Context context) { cuda_driver().cuCtxSetCurrent(context); }
  static CUresult create_stream(Stream* stream) { return cuda_driver().cuStreamCreate(stream, 1 /*non-blocking*/); }
  static CUresult destroy_stream(Stream stream) { return cuda_driver().cuStreamDestroy_v2(stream); }
  static CUresult synchronize_stream(Stream stream) { return cuda_driver().cuStreamSynchronize(stream); }
  static CUresult stream_capture_status(Stream stream, int* status) {
    return cuda_driver().cuStreamIsCapturing(stream, status);
  }
  static CUresult create_event(Event* event, unsigned flags) { return cuda_driver().cuEventCreate(event, flags); }
  static CUresult destroy_event(Event event) { return cuda_driver().cuEventDestroy_v2(event); }
  static CUresult record_event(Event event, Stream stream) { return cuda_driver().cuEventRecord(event, stream); }
  static CUresult synchronize_event(Event event) { return cuda_driver().cuEventSynchronize(event); }
  static CUresult stream_wait_event(Stream stream, Event event) {
    return cuda_driver().cuStreamWaitEvent(stream, event, 0);
  }
  static CUresult query_event(Event event) { return cuda_driver().cuEventQuery(event); }
  static CUresult elapsed_ms(float* ms, Event start, Event end) {
    return cuda_driver().cuEventElapsedTime(ms, start, end);
  }
  static CUresult load_module(Module* module, const void* image) { return cuda_driver().cuModuleLoadData(module, image); }
  static CUresult unload_module(Module module) { return cuda_driver().cuModuleUnload(module); }
  static CUresult module_function(Function* function, Module module, const char* name) {
    return cuda_driver().cuModuleGetFunction(function, module, name);
  }
  static CUresult destroy_graph_exec(GraphExec exec) { return cuda_driver().cuGraphExecDestroy(exec); }
  static CUresult destroy_graph(Graph graph) { return cuda_driver().cuGraphDestroy(graph); }
  static CUresult launch_graph(GraphExec exec, Stream stream) { return cuda_driver().cuGraphLaunch(exec, stream); }
  static CUresult begin_capture(Stream stream, int mode) { return cuda_driver().cuStreamBeginCapture_v2(stream, mode); }
  static CUresult end_capture(Stream stream, Graph* graph) { return cuda_driver().cuStreamEndCapture(stream, graph); }
  static CUresult instantiate_graph(GraphExec* exec, Graph graph) {
    return cuda_driver().cuGraphInstantiateWithFlags(exec, graph, 0);
  }
  static RelaxedCaptureMode::Exchange capture_mode_exchange() {
    return cuda_driver().cuThreadExchangeStreamCaptureMode;
  }

  static CUdeviceptr address(const void* pointer) { return reinterpret_cast<CUdeviceptr>(pointer); }
  static CUresult allocate(void** pointer, size_t bytes) {
    return cuda_driver().cuMemAlloc_v2(reinterpret_cast<CUdeviceptr*>(pointer), bytes);
  }
  static CUresult free(void* pointer) { return cuda_driver().cuMemFree_v2(address(pointer)); }
  static CUresult synchronize_device() { return cuda_driver().cuCtxSynchronize(); }
  static CUresult copy_to_device(void* device, const void* host, size_t bytes) {
    return cuda_driver().cuMemcpyHtoD_v2(address(device), host, bytes);
  }
  static CUresult copy_to_host(void* host, const void* device, size_t bytes) {
    return cuda_driver().cuMemcpyDtoH_v2(host, address(device), bytes);
  }
  static CUresult fill(void* device, uint8_t value, size_t bytes) {
    return cuda_driver().cuMemsetD8_v2(address(device), value, bytes);
  }
  static CUresult copy_on_device_async(void* dst, const void* src, size_t bytes, Stream stream) {
    return cuda_driver().cuMemcpyDtoDAsync_v2(address(dst), address(src), bytes, stream);
  }
  static CUresult copy_to_device_async(void* device, const void* host, size_t bytes, Stream stream) {
    return cuda_driver().cuMemcpyHtoDAsync_v2(address(device), host, bytes, stream);
  }
  static CUresult copy_to_host_async(void* host, const void* device, size_t bytes, Stream stream) {
    return cuda_driver().cuMemcpyDtoHAsync_v2(host, address(device), bytes, stream);
  }
  static CUresult fill_async(void* device, uint8_t value, size_t bytes, Stream stream) {
    return cuda_driver().cuMemsetD8Async(address(device), value, bytes, stream);
  }

  using IpcHandle = CUipcMemHandle;
  static CUresult export_ipc(IpcHandle* handle, void* pointer) {
    return cuda_driver().cuIpcGetMemHandle(handle, address(pointer));
  }
  static CUresult import_ipc(void** pointer, const IpcHandle& handle) {
    return cuda_driver().cuIpcOpenMemHandle_v2(reinterpret_cast<CUdeviceptr*>(pointer), handle,
                                               1 /*lazy peer access*/);
  }
  static CUresult close_ipc(void* pointer) { return cuda_driver().cuIpcCloseMemHandle(address(pointer)); }
};

class CudaDevice final : public GpuDevice<CudaApi> {
 public:
  explicit CudaDevice(int ordinal) {
    const CudaDriver& cu = cuda_driver();
    check(cu.cuInit(0), "initialization (cuInit)");
    int count = 0;
    check(cu.cuDeviceGetCount(&count), "device count");
    if (ordinal < 0 || ordinal >= count) {
      throw Error("CUDA device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) + " visible)",
                  "an ordinal in [0, " + std::to_string(count) + ")", "pick a visible device or set CUDA_VISIBLE_DEVICES");
    }
    check(cu.cuDeviceGet(&device_, ordinal), "device lookup");
    check(cu.cuDevicePrimaryCtxRetain(&context_, device_), "context creation");
    check(cu.cuCtxSetCurrent(context_), "context activation");
    check(cu.cuDeviceGetAttribute(&major_, 75 /*COMPUTE_CAPABILITY_MAJOR*/, device_), "attribute query");
    check(cu.cuDeviceGetAttribute(&minor_, 76 /*COMPUTE_CAPABILITY_MINOR*/, device_), "attribute query");
    check(cu.cuDeviceGetAttribute(&warp_size_, 10 /*WARP_SIZE*/, device_), "attribute query");
    check(cu.cuDeviceGetAttribute(&multiprocessors_, 16 /*MULTIPROCESSOR_COUNT*/, device_), "attribute query");
    dependent_launch_ = dependent_launch_enabled();
  }
  ~CudaDevice() override { cuda_driver().cuDevicePrimaryCtxRelease_v2(device_); }

  std::string_view kind() const override { return "cuda"; }
  Vendor vendor() const override { return Vendor::Nvidia; }
  std::string default_target() const override {
    if (const TargetInfo* target = target_for_cuda_capability(major_, minor_)) return std::string(target->name);
    throw Error("this CUDA GPU has compute capability " + std::to_string(major_) + "." + std::to_string(minor_) +
                    ", for which epjit has no target",
                "a GPU epjit has a target for: " + device_targets_of(Vendor::Nvidia),
                "run on such a GPU (CUDA_VISIBLE_DEVICES selects one), or use the host device");
  }
  int wave_size() const override { return warp_size_; }
  uint32_t resident_blocks(const Kernel& kernel, uint32_t warps_per_block) override {
    current();
    int per_multiprocessor = 0;
    const int threads = int(block_threads(kernel, {1, warps_per_block}, warp_size_));
    check(cuda_driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor,
                                                                    static_cast<CUfunction>(kernel.handle), threads, 0),
          "occupancy query of " + kernel.name);
    return uint32_t(per_multiprocessor) * uint32_t(multiprocessors_);
  }
  bool overlaps_dependent_launches() const override { return dependent_launch_; }
  // A kernel whose record says it waits for its predecessor at entry is
  // launched with programmatic stream serialization: its launch and block
  // scheduling overlap the previous kernel's tail (docs/RUNTIME.md).
  void launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args, Stream& stream) override {
    check_launch(kernel, geometry, args);
    current();
    std::vector<void*> values = args.pointers();
    CUlaunchAttribute dependent{};
    dependent.id = kCuLaunchAttributeProgrammaticStreamSerialization;
    dependent.value.programmatic_stream_serialization_allowed = 1;
    const bool overlap = kernel.dependent_launch && dependent_launch_;
    const CUlaunchConfig config{.grid_x = geometry.blocks,
                                .grid_y = 1,
                                .grid_z = 1,
                                .block_x = block_threads(kernel, geometry, warp_size_),
                                .block_y = 1,
                                .block_z = 1,
                                .shared_bytes = 0,
                                .stream = native_stream<CudaApi>(stream),
                                .attributes = overlap ? &dependent : nullptr,
                                .attribute_count = overlap ? 1u : 0u};
    const CUresult launched =
        cuda_driver().cuLaunchKernelEx(&config, static_cast<CUfunction>(kernel.handle), values.data(), nullptr);
    // The message is built only on failure: a small call waits for this path.
    if (launched != 0) check(launched, "kernel launch of " + kernel.name);
  }

 private:
  CUdevice device_ = 0;
  int major_ = 0, minor_ = 0, warp_size_ = 32, multiprocessors_ = 0;
  bool dependent_launch_ = true;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int ordinal) { return std::make_unique<CudaDevice>(ordinal); }

}  // namespace epjit
