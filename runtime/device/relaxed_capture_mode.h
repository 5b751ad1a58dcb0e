// The CaptureExemption of the CUDA and HIP devices: their drivers' capture
// modes and the call that exchanges them have one shape.
#pragma once

#include <string>

#include "epjit/device.h"

namespace epjit {

// CU_STREAM_CAPTURE_MODE_RELAXED and hipStreamCaptureModeRelaxed: a capture
// that forbids no call of any thread.
constexpr int kRelaxedCaptureMode = 2;

// The calling thread's capture mode is relaxed while this lives, and what it
// was before once it goes.
class RelaxedCaptureMode final : public CaptureExemption {
 public:
  using Exchange = int (*)(int* mode);                          // cuThreadExchangeStreamCaptureMode's shape
  using Check = void (*)(int status, const std::string& what);  // throws for a failed status

  // Without a check (frees, which run in destructors and must not throw) a
  // failed exchange leaves the thread's mode as it was, with nothing to restore.
  explicit RelaxedCaptureMode(Exchange exchange, Check check = nullptr) : exchange_(exchange) {
    const int status = exchange_(&mode_);
    exchanged_ = status == 0;
    if (check) check(status, "capture mode exchange");
  }
  ~RelaxedCaptureMode() override {
    if (exchanged_) exchange_(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  Exchange exchange_;
  int mode_ = kRelaxedCaptureMode;  // after the exchange: the thread's mode before
  bool exchanged_ = false;
};

}  // namespace epjit
