// The GPU driver APIs epjit uses, as dlopen'd symbol tables (IREE's style):
// one struct of function pointers per driver, all resolved when the library
// loads, so a missing symbol is reported once and up front.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/dynamic_library.h"

namespace epjit::drivers {

// ------------------------------------------------------------ CUDA driver API
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
struct CUipcMemHandle {
  char reserved[64];
};
// cuLaunchKernelEx's configuration, laid out as cuda.h has it (CUDA 12+).
inline constexpr int kCuLaunchAttributeProgrammaticStreamSerialization = 6;
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    alignas(8) char bytes[64];
    unsigned programmatic_stream_serialization_allowed;
  } value;
};
static_assert(sizeof(CUlaunchAttribute) == 72);
struct CUlaunchConfig {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  CUstream stream;
  CUlaunchAttribute* attributes;
  unsigned attribute_count;
};
static_assert(sizeof(CUlaunchConfig) == 56);

#define EPJIT_CUDA_SYMBOLS(X)                                                                                 \
  X(cuInit, CUresult, unsigned)                                                                               \
  X(cuGetErrorString, CUresult, CUresult, const char**)                                                       \
  X(cuDeviceGet, CUresult, CUdevice*, int)                                                                    \
  X(cuDeviceGetCount, CUresult, int*)                                                                         \
  X(cuDeviceGetAttribute, CUresult, int*, int, CUdevice)                                                      \
  X(cuDevicePrimaryCtxRetain, CUresult, CUcontext*, CUdevice)                                                 \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, CUdevice)                                                         \
  X(cuCtxSetCurrent, CUresult, CUcontext)                                                                     \
  X(cuCtxSynchronize, CUresult)                                                                               \
  X(cuMemAlloc_v2, CUresult, CUdeviceptr*, size_t)                                                            \
  X(cuMemFree_v2, CUresult, CUdeviceptr)                                                                      \
  X(cuMemcpyHtoD_v2, CUresult, CUdeviceptr, const void*, size_t)                                              \
  X(cuMemcpyDtoH_v2, CUresult, void*, CUdeviceptr, size_t)                                                    \
  X(cuMemcpyDtoDAsync_v2, CUresult, CUdeviceptr, CUdeviceptr, size_t, CUstream)                               \
  X(cuMemsetD8_v2, CUresult, CUdeviceptr, unsigned char, size_t)                                              \
  X(cuMemcpyHtoDAsync_v2, CUresult, CUdeviceptr, const void*, size_t, CUstream)                               \
  X(cuMemcpyDtoHAsync_v2, CUresult, void*, CUdeviceptr, size_t, CUstream)                                     \
  X(cuMemsetD8Async, CUresult, CUdeviceptr, unsigned char, size_t, CUstream)                                  \
  X(cuModuleLoadData, CUresult, CUmodule*, const void*)                                                       \
  X(cuModuleUnload, CUresult, CUmodule)                                                                       \
  X(cuModuleGetFunction, CUresult, CUfunction*, CUmodule, const char*)                                        \
  X(cuLaunchKernelEx, CUresult, const CUlaunchConfig*, CUfunction, void**, void**)                            \
  X(cuStreamCreate, CUresult, CUstream*, unsigned)                                                            \
  X(cuStreamDestroy_v2, CUresult, CUstream)                                                                   \
  X(cuStreamSynchronize, CUresult, CUstream)                                                                  \
  X(cuStreamWaitEvent, CUresult, CUstream, CUevent, unsigned)                                                 \
  X(cuEventCreate, CUresult, CUevent*, unsigned)                                                              \
  X(cuEventRecord, CUresult, CUevent, CUstream)                                                               \
  X(cuEventSynchronize, CUresult, CUevent)                                                                    \
  X(cuEventQuery, CUresult, CUevent)                                                                          \
  X(cuEventElapsedTime, CUresult, float*, CUevent, CUevent)                                                   \
  X(cuEventDestroy_v2, CUresult, CUevent)                                                                     \
  X(cuIpcGetMemHandle, CUresult, CUipcMemHandle*, CUdeviceptr)                                                \
  X(cuIpcOpenMemHandle_v2, CUresult, CUdeviceptr*, CUipcMemHandle, unsigned)                                  \
  X(cuIpcCloseMemHandle, CUresult, CUdeviceptr)                                                               \
  X(cuStreamBeginCapture_v2, CUresult, CUstream, int)                                                         \
  X(cuStreamEndCapture, CUresult, CUstream, CUgraph*)                                                         \
  X(cuStreamIsCapturing, CUresult, CUstream, int*)                                                            \
  X(cuThreadExchangeStreamCaptureMode, CUresult, int*)                                                        \
  X(cuGraphInstantiateWithFlags, CUresult, CUgraphExec*, CUgraph, unsigned long long)                         \
  X(cuGraphLaunch, CUresult, CUgraphExec, CUstream)                                                           \
  X(cuGraphExecDestroy, CUresult, CUgraphExec)                                                                \
  X(cuGraphDestroy, CUresult, CUgraph)                                                                        \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, CUresult, int*, CUfunction, int, size_t)

// ------------------------------------------------------------ HIP runtime API
using hipError_t = int;
using hipModule_t = struct ihipModule_t*;
using hipFunction_t = struct ihipModuleSymbol_t*;
using hipStream_t = struct ihipStream_t*;
using hipEvent_t = struct ihipEvent_t*;
using hipGraph_t = struct ihipGraph*;
using hipGraphExec_t = struct hipGraphExec*;
struct hipIpcMemHandle_t {
  char reserved[64];
};

#define EPJIT_HIP_SYMBOLS(X)                                                                                  \
  X(hipInit, hipError_t, unsigned)                                                                            \
  X(hipGetErrorString, const char*, hipError_t)                                                               \
  X(hipGetDeviceCount, hipError_t, int*)                                                                      \
  X(hipSetDevice, hipError_t, int)                                                                            \
  X(hipDeviceSynchronize, hipError_t)                                                                         \
  X(hipMalloc, hipError_t, void**, size_t)                                                                    \
  X(hipFree, hipError_t, void*)                                                                               \
  X(hipMemcpy, hipError_t, void*, const void*, size_t, int)                                                   \
  X(hipMemcpyAsync, hipError_t, void*, const void*, size_t, int, hipStream_t)                                 \
  X(hipMemset, hipError_t, void*, int, size_t)                                                                \
  X(hipMemsetAsync, hipError_t, void*, int, size_t, hipStream_t)                                              \
  X(hipModuleLoadData, hipError_t, hipModule_t*, const void*)                                                 \
  X(hipModuleUnload, hipError_t, hipModule_t)                                                                 \
  X(hipModuleGetFunction, hipError_t, hipFunction_t*, hipModule_t, const char*)                               \
  X(hipModuleLaunchKernel, hipError_t, hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,        \
    unsigned, unsigned, hipStream_t, void**, void**)                                                          \
  X(hipStreamCreate, hipError_t, hipStream_t*)                                                                \
  X(hipStreamDestroy, hipError_t, hipStream_t)                                                                \
  X(hipStreamSynchronize, hipError_t, hipStream_t)                                                            \
  X(hipStreamWaitEvent, hipError_t, hipStream_t, hipEvent_t, unsigned)                                        \
  X(hipEventCreateWithFlags, hipError_t, hipEvent_t*, unsigned)                                               \
  X(hipEventRecord, hipError_t, hipEvent_t, hipStream_t)                                                      \
  X(hipEventSynchronize, hipError_t, hipEvent_t)                                                              \
  X(hipEventQuery, hipError_t, hipEvent_t)                                                                    \
  X(hipEventElapsedTime, hipError_t, float*, hipEvent_t, hipEvent_t)                                          \
  X(hipEventDestroy, hipError_t, hipEvent_t)                                                                  \
  X(hipIpcGetMemHandle, hipError_t, hipIpcMemHandle_t*, void*)                                                \
  X(hipIpcOpenMemHandle, hipError_t, void**, hipIpcMemHandle_t, unsigned)                                     \
  X(hipIpcCloseMemHandle, hipError_t, void*)                                                                  \
  X(hipStreamBeginCapture, hipError_t, hipStream_t, int)                                                      \
  X(hipStreamEndCapture, hipError_t, hipStream_t, hipGraph_t*)                                                \
  X(hipStreamIsCapturing, hipError_t, hipStream_t, int*)                                                      \
  X(hipThreadExchangeStreamCaptureMode, hipError_t, int*)                                                     \
  X(hipGraphInstantiate, hipError_t, hipGraphExec_t*, hipGraph_t, void*, char*, size_t)                       \
  X(hipGraphLaunch, hipError_t, hipGraphExec_t, hipStream_t)                                                  \
  X(hipGraphExecDestroy, hipError_t, hipGraphExec_t)                                                          \
  X(hipGraphDestroy, hipError_t, hipGraph_t)                                                                  \
  X(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor, hipError_t, int*, hipFunction_t, int, size_t)

#define EPJIT_DECLARE_SYMBOL(name, result, ...) result (*name)(__VA_ARGS__) = nullptr;

struct CudaDriver {
  DynamicLibrary library;
  EPJIT_CUDA_SYMBOLS(EPJIT_DECLARE_SYMBOL)
};

struct HipDriver {
  DynamicLibrary library;
  EPJIT_HIP_SYMBOLS(EPJIT_DECLARE_SYMBOL)
  // hipGetDevicePropertiesR0600 where HIP has it (ROCm 6+), else the R0000
  // hipGetDeviceProperties; the layout follows (hip_properties.h).
  hipError_t (*hipGetDeviceProperties)(void*, int) = nullptr;
  bool properties_r0600 = false;
};

// Loads the library and resolves every symbol; throws epjit::Error naming the
// libraries looked for (or the missing symbol).
const CudaDriver& cuda_driver();
const HipDriver& hip_driver();

}  // namespace epjit::drivers
