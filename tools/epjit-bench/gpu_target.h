// The target of this host's GPU of a vendor, for `epjit-bench --device cuda|hip`
// without --target: read from the device itself (CUDA's compute capability,
// HIP's gcnArchName) in a child process, because the rank processes open
// the device and the driver must not be initialized before they fork.
#pragma once

#include <string>

namespace epjit::bench {

// The default target of GPU 0 of `device` ("cuda" or "hip"). Throws the
// device's own epjit::Error (no driver library, no GPU, a GPU epjit has no
// target for), carried over from the child.
std::string detected_gpu_target(const std::string& device);

}  // namespace epjit::bench
