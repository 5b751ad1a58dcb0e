// The GPUs a GPU test runs on, by vendor API: CUDA (NVIDIA: sm90, sm100) or
// HIP (AMD: gfx942, gfx950, gfx1250, gfx1200), each driver loaded by dlopen,
// so the tests build where neither is installed. Every suite is instantiated
// once per API; a case runs on the target of the GPU found (the device's
// default_target()), and is skipped, with the driver's reason, where the
// API has no GPU here.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit::testing {

enum class GpuApi { Cuda, Hip };

inline const char* apiName(GpuApi api) { return api == GpuApi::Cuda ? "CUDA" : "HIP"; }

inline std::unique_ptr<Device> makeGpu(GpuApi api, int ordinal) {
  return api == GpuApi::Cuda ? make_cuda_device(ordinal) : make_hip_device(ordinal);
}

// What a GPU test finds of one API: how many GPUs, the target of the first
// (all of a host's GPUs are one kind here), or why there is none.
struct GpuProbe {
  int count = 0;
  std::string target;
  std::string why_not;
};

// Probed in a child process: the driver must not be initialized in the
// parent before it forks the rank processes.
inline GpuProbe probeInChild(GpuApi api) {
  GpuProbe probe;
  int fds[2];
  if (pipe(fds) != 0) return {0, "", "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int count = 0;
    std::string target, why;
    for (int ordinal = 0; ordinal < 8; ++ordinal) {
      try {
        auto device = makeGpu(api, ordinal);
        if (count == 0) target = device->default_target();
        ++count;
      } catch (const std::exception& error) {
        if (count == 0) why = error.what();
        break;
      }
    }
    const std::string report = target + "\n" + why;
    if (write(fds[1], report.data(), report.size()) < 0) _exit(100);
    _exit(count);
  }
  close(fds[1]);
  std::string report;
  char buffer[2048];
  for (ssize_t got; (got = read(fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  probe.count = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  const size_t newline = report.find('\n');
  probe.target = report.substr(0, newline);
  if (newline != std::string::npos) probe.why_not = report.substr(newline + 1);
  if (!WIFEXITED(status) || WEXITSTATUS(status) > 8)
    probe.why_not = std::string("the ") + apiName(api) + " probe process died (status " + std::to_string(status) + ")";
  if (probe.count > 8) probe.count = 0;
  if (probe.count == 0 && probe.why_not.empty()) probe.why_not = std::string("no ") + apiName(api) + " device";
  if (probe.count > 0 && probe.target.empty()) {
    probe.count = 0;
    probe.why_not = std::string("the ") + apiName(api) + " device matches no epjit target";
  }
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
