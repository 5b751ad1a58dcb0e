// What a failed CUDA or HIP driver call's error tells the user to do. Most
// failures point at the GPU or its visibility; the stream-capture errors
// (900-908, the same codes in CUDA and HIP) come from a call made while a
// graph is being captured, on a healthy GPU, so "check the GPU" would send
// the user the wrong way.
#pragma once

#include <string>

namespace epjit {

struct DriverErrorAdvice {
  std::string expected;
  std::string fix;
};

inline bool is_stream_capture_error(int status) { return status >= 900 && status <= 908; }

// `gpu`: "CUDA device" / "AMD GPU"; `smi`, `visible`: the vendor's tool and
// device-visibility variable.
inline DriverErrorAdvice driver_error_advice(int status, const std::string& gpu, const std::string& smi,
                                             const std::string& visible) {
  if (is_stream_capture_error(status))
    return {"no graph capture that forbids this call in progress (a framework's, such as torch.cuda.graph, or one "
            "on the op's own stream)",
            "make the call outside the capture: end it, launch the graph, then call again"};
  return {"a working " + gpu, "check the GPU with " + smi + "; " + visible + " may hide it"};
}

}  // namespace epjit
