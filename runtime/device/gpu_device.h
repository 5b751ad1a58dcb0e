// What the CUDA and HIP devices do alike, written once over the driver's API
// table (gpu_objects.h): memory, copies and fills, streams, events, modules,
// graph capture and shareable memory. Each device adds what differs: how it
// finds its GPU and target, its occupancy query and its launch.
//
// Copies and fills are complete when they return: a pageable copy may return
// before its DMA lands, and the op's streams do not wait for the stream a
// synchronous copy ran on, so a kernel launched next could read stale input.
// The stream forms wait for that stream alone. Frees, like allocations,
// never belong to a graph: under a framework's capture in global mode
// (torch.cuda.graph's default) a free from any thread would fail and end
// that capture, so they run in the thread's relaxed capture mode.
#pragma once

#include <cstring>

#include "gpu_objects.h"
#include "relaxed_capture_mode.h"

namespace epjit::drivers {

template <typename Api>
class GpuDevice : public Device {
 public:
  bool host_addressable() const override { return false; }
  SharingMethod sharing() const override { return SharingMethod::IpcHandle; }

  void* allocate(size_t bytes) override {
    current();
    void* pointer = nullptr;
    Api::check(Api::allocate(&pointer, bytes), "allocation");
    return pointer;
  }
  void release(void* pointer) override {
    if (!pointer) return;
    current();
    const RelaxedCaptureMode exemption(Api::capture_mode_exchange());
    Api::free(pointer);
  }
  void copy_to_device(void* device, const void* host, size_t bytes) override {
    current();
    Api::check(Api::copy_to_device(device, host, bytes), "copy to device");
    Api::check(Api::synchronize_device(), "copy to device (completion)");
  }
  void copy_to_host(void* host, const void* device, size_t bytes) override {
    current();
    Api::check(Api::synchronize_device(), "copy to host (pending work)");
    Api::check(Api::copy_to_host(host, device, bytes), "copy to host");
  }
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    current();
    Api::check(Api::copy_on_device_async(dst, src, bytes, native_stream<Api>(stream)), "device copy");
  }
  void fill_zero(void* device, size_t bytes) override {
    current();
    Api::check(Api::fill(device, 0, bytes), "memset");
    Api::check(Api::synchronize_device(), "memset (completion)");
  }
  void copy_to_device(void* device, const void* host, size_t bytes, Stream& stream) override {
    current();
    const typename Api::Stream handle = native_stream<Api>(stream);
    Api::check(Api::copy_to_device_async(device, host, bytes, handle), "copy to device");
    Api::check(Api::synchronize_stream(handle), "copy to device (completion)");
  }
  void copy_to_host(void* host, const void* device, size_t bytes, Stream& stream) override {
    current();
    const typename Api::Stream handle = native_stream<Api>(stream);
    Api::check(Api::copy_to_host_async(host, device, bytes, handle), "copy to host");
    Api::check(Api::synchronize_stream(handle), "copy to host (completion)");
  }
  void fill_bytes(void* device, uint8_t value, size_t bytes, Stream& stream) override {
    current();
    const typename Api::Stream handle = native_stream<Api>(stream);
    Api::check(Api::fill_async(device, value, bytes, handle), "memset");
    Api::check(Api::synchronize_stream(handle), "memset (completion)");
  }
  std::unique_ptr<Module> load_module(const std::vector<uint8_t>& binary) override {
    current();
    return std::make_unique<GpuModule<Api>>(binary);
  }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<GpuStream<Api>>(context_); }
  std::unique_ptr<Stream> wrap_stream(void* native) override {
    return std::make_unique<GpuStream<Api>>(context_, static_cast<typename Api::Stream>(native));
  }
  std::unique_ptr<Event> create_event(EventUse use) override {
    current();
    return std::make_unique<GpuEvent<Api>>(context_, use);
  }
  void synchronize() override {
    current();
    Api::check(Api::synchronize_device(), "device synchronize");
  }

  bool supports_graphs() const override { return true; }
  void begin_capture(Stream& stream) override {
    current();
    Api::check(Api::begin_capture(native_stream<Api>(stream), kRelaxedCaptureMode), "stream capture begin");
  }
  std::unique_ptr<Graph> end_capture(Stream& stream) override {
    current();
    typename Api::Graph graph = nullptr;
    Api::check(Api::end_capture(native_stream<Api>(stream), &graph), "stream capture end");
    typename Api::GraphExec exec = nullptr;
    Api::check(Api::instantiate_graph(&exec, graph), "graph instantiation");
    return std::make_unique<GpuGraph<Api>>(graph, exec);
  }
  std::unique_ptr<CaptureExemption> exempt_from_capture() override {
    current();
    return std::make_unique<RelaxedCaptureMode>(Api::capture_mode_exchange(), Api::check);
  }

  ShareableMemory allocate_shareable(size_t bytes) override {
    ShareableMemory memory;
    memory.bytes = bytes;
    memory.pointer = allocate(bytes);
    fill_zero(memory.pointer, bytes);
    typename Api::IpcHandle handle;
    Api::check(Api::export_ipc(&handle, memory.pointer), "IPC handle export");
    memory.ipc_handle.assign(reinterpret_cast<uint8_t*>(&handle), reinterpret_cast<uint8_t*>(&handle) + sizeof handle);
    return memory;
  }
  void* open_shareable(const ShareableMemory& exported) override {
    current();
    typename Api::IpcHandle handle;
    if (exported.ipc_handle.size() != sizeof handle)
      throw Error(std::string("a ") + Api::kName + " IPC handle has " + std::to_string(exported.ipc_handle.size()) +
                      " bytes",
                  std::to_string(sizeof handle) + " bytes", "pass the handle exported by allocate_shareable unchanged");
    std::memcpy(&handle, exported.ipc_handle.data(), sizeof handle);
    void* pointer = nullptr;
    Api::check(Api::import_ipc(&pointer, handle), "IPC handle import");
    return pointer;
  }
  void close_shareable(void* pointer, size_t) override {
    current();
    const RelaxedCaptureMode exemption(Api::capture_mode_exchange());  // as release()
    Api::close_ipc(pointer);
  }
  void free_shareable(void* pointer, size_t) override { release(pointer); }

 protected:
  void current() const { Api::make_current(context_); }
  typename Api::Context context_{};
};

}  // namespace epjit::drivers
