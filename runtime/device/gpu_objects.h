// The stream, event, module and graph of a GPU driver, written once over the
// driver's API table (CudaApi in cuda_device.cpp, HipApi in hip_device.cpp):
// the two drivers differ in their symbols' names, not in what these objects
// do. An API table gives the handle types, `check(status, what)`, the
// driver's `kName` ("CUDA", "HIP"), a `Context` made current before a call
// that may come from another thread (an empty type where the driver has
// none), and one static function per driver call used below.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit::drivers {

template <typename Api>
class GpuStream final : public Stream {
 public:
  explicit GpuStream(typename Api::Context context) : context_(context) {
    Api::make_current(context_);
    Api::check(Api::create_stream(&stream_), "stream creation");
  }
  GpuStream(typename Api::Context context, typename Api::Stream foreign)
      : context_(context), stream_(foreign), owned_(false) {}
  ~GpuStream() override {
    if (owned_) Api::destroy_stream(stream_);
  }
  void synchronize() override { Api::check(Api::synchronize_stream(stream_), "stream synchronize"); }
  typename Api::Stream handle() const { return stream_; }
  void* native_handle() const override { return stream_; }
  bool capturing() const override {
    int status = 0;  // the capture status "none"
    Api::check(Api::stream_capture_status(stream_, &status), "stream capture query");
    return status != 0;
  }

 private:
  typename Api::Context context_;
  typename Api::Stream stream_ = nullptr;
  bool owned_ = true;
};

template <typename Api>
typename Api::Stream native_stream(Stream& stream) {
  return static_cast<GpuStream<Api>&>(stream).handle();
}

template <typename Api>
class GpuEvent final : public Event {
 public:
  GpuEvent(typename Api::Context context, EventUse use) : Event(use), context_(context) {
    constexpr unsigned kDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING, hipEventDisableTiming
    Api::check(Api::create_event(&event_, use == EventUse::timing ? 0u : kDisableTiming), "event creation");
  }
  ~GpuEvent() override { Api::destroy_event(event_); }
  void record(Stream& stream) override {
    Api::check(Api::record_event(event_, native_stream<Api>(stream)), "event record");
  }
  void enqueue_wait(Stream& stream) override {
    Api::check(Api::stream_wait_event(native_stream<Api>(stream), event_), "stream wait for an event");
  }
  void synchronize() override { Api::check(Api::synchronize_event(event_), "event synchronize"); }
  bool completed() override {
    constexpr int kNotReady = 600;  // CUDA_ERROR_NOT_READY, hipErrorNotReady
    Api::make_current(context_);    // may be asked from another thread (the internode watcher)
    const auto result = Api::query_event(event_);
    if (result == kNotReady) return false;
    Api::check(result, "event query");
    return true;
  }
  float measured_ms(const Event& start) const override {
    float ms = 0;
    Api::check(Api::elapsed_ms(&ms, static_cast<const GpuEvent&>(start).event_, event_), "elapsed time");
    return ms;
  }

 private:
  typename Api::Context context_;
  typename Api::Event event_ = nullptr;
};

template <typename Api>
class GpuModule final : public Module {
 public:
  explicit GpuModule(const std::vector<uint8_t>& binary) {
    Api::check(Api::load_module(&module_, binary.data()), std::string("module load (") + Api::kModuleLoad + ")");
  }
  ~GpuModule() override { Api::unload_module(module_); }
  Kernel kernel(std::string_view name) override {
    typename Api::Function function = nullptr;
    const std::string symbol(name);
    if (Api::module_function(&function, module_, symbol.c_str()) != 0) {
      throw Error("kernel '" + symbol + "' is not in the " + Api::kName + " module", "a kernel the template defines",
                  "check the kernel name (epjit-compile --template list)");
    }
    return {function, symbol};
  }

 private:
  typename Api::Module module_ = nullptr;
};

template <typename Api>
class GpuGraph final : public Graph {
 public:
  GpuGraph(typename Api::Graph graph, typename Api::GraphExec exec) : graph_(graph), exec_(exec) {}
  ~GpuGraph() override {
    Api::destroy_graph_exec(exec_);
    Api::destroy_graph(graph_);
  }
  void launch(Stream& stream) override {
    Api::check(Api::launch_graph(exec_, native_stream<Api>(stream)), "graph launch");
  }

 private:
  typename Api::Graph graph_;
  typename Api::GraphExec exec_;
};

}  // namespace epjit::drivers
