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

inline std::unique_ptr<Device> makeGpu(GpuApi api, int ordinal) {
  return api == GpuApi::Cuda ? make_cuda_device(ordinal) : make_hip_device(ordinal);
}

// What a GPU test finds of one API (epjit::survey_gpus: read in a child
// process, since the driver must not be initialized in the parent before it
// forks the rank processes): how many GPUs, the target of the first (all of a
// host's GPUs are one kind here), or why there is none.
struct GpuProbe {
  int count = 0;
  std::string target;
  std::string why_not;
};

inline GpuProbe probeInChild(GpuApi api) {
  const GpuSurvey survey = survey_gpus(api == GpuApi::Cuda ? "cuda" : "hip");
  GpuProbe probe{survey.count, survey.target, survey.error ? survey.error->what() : ""};
  if (probe.count == 0 && probe.why_not.empty()) probe.why_not = std::string("no ") + apiName(api) + " device";
  return probe;
}

inline const GpuProbe& gpusOf(GpuApi api) {
  if (api == GpuApi::Cuda) {
    static const GpuProbe cuda = probeInChild(GpuApi::Cuda);
    return cuda;
  }
  static const GpuProbe hip = probeInChild(GpuApi::Hip);
  return hip;
}

// "no HIP device: <the driver's reason>", the skip message of a case the API
// cannot run here; "" where it has a GPU.
inline std::string noGpu(GpuApi api) {
  const GpuProbe& found = gpusOf(api);
  if (found.count > 0) return "";
  return std::string("no ") + apiName(api) + " device: " + found.why_not;
}

}  // namespace epjit::testing
