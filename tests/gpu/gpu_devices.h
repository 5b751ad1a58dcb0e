// The GPUs a GPU test runs on, by vendor API: CUDA (NVIDIA: sm90, sm100) or
// HIP (AMD: gfx942, gfx950, gfx1250, gfx1200), each driver loaded by dlopen,
// so the tests build where neither is installed. Every suite is instantiated
// once per API; a case runs on the target of the GPU found (the device's
// default_target()), and is skipped, with the driver's reason, where the
// API has no GPU here.
#pragma once

#include <memory>
#include <string>

#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit::testing {

enum class GpuApi { Cuda, Hip };

inline const char* apiName(GpuApi api) { return api == GpuApi::Cuda ? "CUDA" : "HIP"; }

// epjit's device kind of the API: "cuda" or "hip".
inline const char* kindOf(GpuApi api) { return api == GpuApi::Cuda ? "cuda" : "hip"; }

inline std::unique_ptr<Device> makeGpu(GpuApi api, int ordinal) { return make_device(kindOf(api), ordinal); }

// What this host has of the API (epjit::survey_gpus: read once, in a child
// process, since the driver must not be initialized in the parent before it
// forks the rank processes): how many GPUs, the target of the first (all of a
// host's GPUs are one kind here), or the error that opening them gave.
inline const GpuSurvey& gpusOf(GpuApi api) {
  if (api == GpuApi::Cuda) {
    static const GpuSurvey cuda = survey_gpus(kindOf(GpuApi::Cuda));
    return cuda;
  }
  static const GpuSurvey hip = survey_gpus(kindOf(GpuApi::Hip));
  return hip;
}

// "no HIP device: <the driver's reason>", the skip message of a case the API
// cannot run here; "" where it has a GPU.
inline std::string noGpu(GpuApi api) {
  const GpuSurvey& found = gpusOf(api);
  if (found.count > 0) return "";
  return std::string("no ") + apiName(api) + " device" + (found.error ? std::string(": ") + found.error->what() : "");
}

}  // namespace epjit::testing
