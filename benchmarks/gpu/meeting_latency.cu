// What a cross-rank meeting costs on one GPU, apart from any EP kernel:
// the grid-wide count epjit's templates use today (every block counts itself
// with one gpu-scope atomic, the last one fences at system scope and raises
// the flag, a poller waits for it) against per-block arrivals (every block
// fences and adds its share to the meeting's counter itself; nobody counts
// the grid). Also the single steps those are made of, each timed in a
// dependent chain with %globaltimer. Build and run on the GPU host:
//   nvcc -O3 -arch=sm_90 -o meeting_latency meeting_latency.cu && ./meeting_latency
// Results and their record: docs/PERFORMANCE.md.
#include <cuda_runtime.h>

#include "cuda_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ int atom_add_relaxed_sys(int* p, int v) {
  int old;
  asm volatile("atom.relaxed.sys.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void red_add_release_sys(int* p, int v) {
  asm volatile("red.release.sys.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void store_relaxed_sys(int* p, int v) {
  asm volatile("st.relaxed.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int load_acquire_sys(const int* p) {
  int v;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int load_relaxed_sys(const int* p) {
  int v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A kernel taking the window table by value, as every EP kernel does
// (epjit::Window: 32 region offsets and 64 peer bases, 768 bytes).
struct WindowTable {
  unsigned long long region_offset[32];
  char* peer_base[64];
};
__global__ void empty_with_window(int*, const __grid_constant__ WindowTable table) {
  if (table.region_offset[0] == 12345) asm volatile("trap;");
}

// state: [0] arrivals, [1] flag, [2..3] per-block counters by epoch parity, [8..] a row.
__global__ void empty_kernel(int*, int) {}

// Today's meeting (templates/ep/sync.mlir @arrive + @poll_all), world 1.
// all_wait: every block waits (combine), else only the last block (dispatch).
__global__ void counted_meeting(int* state, int epoch, bool all_wait) {
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    const int before = atom_add_acq_rel_gpu(&state[0], 1);
    last = before == int(gridDim.x) - 1;
    if (last) {
      store_relaxed_sys(&state[0], 0);
      fence_sys();
      store_relaxed_sys(&state[1], epoch);
    }
    if (last || all_wait)
      while (load_acquire_sys(&state[1]) < epoch) {
      }
  }
  __syncthreads();
}

// Per-block arrivals: block b adds 1 (block 0: kShare - blocks + 1) with a
// system-scope release, so a rank's blocks add kShare whatever its grid;
// the counter of this epoch's parity is complete at kShare * ranks. Block 0
// clears the other parity's counter first (its last use ended with the
// kernel before; its next begins after this meeting, which needs block 0).
constexpr int kShare = 1 << 16;
__global__ void per_block_meeting(int* state, int epoch, bool all_wait) {
  int* counter = &state[2 + (epoch & 1)];
  if (blockIdx.x == 0 && threadIdx.x == 0) store_relaxed_sys(&state[2 + ((epoch + 1) & 1)], 0);
  __syncthreads();
  if (threadIdx.x == 0) {
    const int share = blockIdx.x == 0 ? kShare - int(gridDim.x) + 1 : 1;
    red_add_release_sys(counter, share);
    if (blockIdx.x == 0 || all_wait)
      while (load_acquire_sys(counter) < kShare) {
      }
  }
  __syncthreads();
}

// One thread times `reps` dependent steps of one kind (each step's address
// depends on the last step's result, so none overlaps the next);
// out[kind] = ns per step.
__device__ __forceinline__ int next_index(int v) { return (v >> 30) & 1; }
__global__ void step_latency(int* state, long long* out, int reps) {
  if (threadIdx.x != 0) return;
  int* w = &state[8];
  int v = 0;
  unsigned long long t0 = now();
  for (int i = 0; i < reps; ++i) v = atom_add_acq_rel_gpu(&w[next_index(v)], 1);
  out[0] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) v = atom_add_relaxed_sys(&w[next_index(v)], 1);
  out[1] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) v = load_acquire_sys(&w[next_index(v)]);
  out[2] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) v = load_relaxed_sys(&w[next_index(v)]);
  out[3] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) fence_sys();
  out[4] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) {
    store_relaxed_sys(&w[2 + (i & 7)], i);
    fence_sys();
  }
  out[5] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) asm volatile("fence.acq_rel.gpu;" ::: "memory");
  out[6] = (now() - t0) / reps;
  t0 = now();
  for (int i = 0; i < reps; ++i) red_add_release_sys(&w[4], 1);
  out[7] = (now() - t0) / reps;
  if (v == 12345) out[8] = v;
}

template <typename Launch>
void time_kernel(const char* name, Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 50; ++i) launch(i);
  CHECK(cudaDeviceSynchronize());
  // One launch between two events, as epjit-bench times a leg: the median.
  std::vector<float> single;
  for (int i = 0; i < 200; ++i) {
    CHECK(cudaEventRecord(a));
    launch(1000 + i);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    single.push_back(ms * 1000);
  }
  std::sort(single.begin(), single.end());
  // Back to back: the launch overhead overlaps, what is left is the kernel.
  const int n = 500;
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < n; ++i) launch(2000 + i);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  std::printf("%-34s single %6.2f us (p10 %6.2f, p90 %6.2f)   back-to-back %6.2f us\n", name, single[100], single[20],
              single[180], ms * 1000 / n);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
}

int main() {
  int* state;
  long long* out;
  CHECK(cudaMalloc(&state, 4096));
  CHECK(cudaMalloc(&out, 16 * sizeof(long long)));
  CHECK(cudaMemset(state, 0, 4096));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  step_latency<<<1, 32>>>(state, out, 1000);
  CHECK(cudaDeviceSynchronize());
  long long h[16];
  CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  const char* steps[] = {"atom.acq_rel.gpu.add", "atom.relaxed.sys.add", "ld.acquire.sys",
                         "ld.relaxed.sys",                  "fence.acq_rel.sys, nothing pending", "st.relaxed.sys + fence.acq_rel.sys",
                         "fence.acq_rel.gpu",               "red.release.sys.add, back to back"};
  for (int i = 0; i < 8; ++i) std::printf("step %-38s %5lld ns\n", steps[i], h[i]);

  for (int blocks : {1, 128}) {
    for (int threads : {128, 512}) {
      char name[64];
      std::snprintf(name, sizeof name, "empty %dx%d", blocks, threads);
      time_kernel(name, [&](int) { empty_kernel<<<blocks, threads>>>(state, 0); });
    }
  }
  // What the launch path adds for the EP kernels' parameters and launch mode:
  // a 768-byte window table by value, and cudaLaunchKernelEx with
  // programmatic stream serialization (epjit's sm90 launches).
  WindowTable table{};
  time_kernel("empty 128x256 + 768 B window", [&](int) { empty_with_window<<<128, 256>>>(state, table); });
  for (bool programmatic : {false, true}) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(128);
    config.blockDim = dim3(256);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = programmatic ? 1 : 0;
    time_kernel(programmatic ? "the same, LaunchKernelEx, programmatic" : "the same, LaunchKernelEx",
                [&](int) { CHECK(cudaLaunchKernelEx(&config, empty_with_window, state, table)); });
  }
  // The same from a CUDA graph (one kernel node; then two, as a dispatch ->
  // combine round trip in one graph would be).
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int kernels : {1, 2}) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < kernels; ++k) empty_kernel<<<128, 256, 0, stream>>>(state, 0);
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    char name[64];
    std::snprintf(name, sizeof name, "graph of %d empty 128x256", kernels);
    time_kernel(name, [&](int) { CHECK(cudaGraphLaunch(exec, 0)); });
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  // Epochs keep rising across the runs (the flag and the parity counters
  // compare against them), so each run continues the last one's sequence.
  int epoch = 0;
  CHECK(cudaMemset(state, 0, 4096));
  for (int blocks : {32, 128}) {
    for (bool all_wait : {false, true}) {
      char name[64];
      std::snprintf(name, sizeof name, "counted %s %dx256", all_wait ? "all-wait" : "last-wait", blocks);
      time_kernel(name, [&](int) { counted_meeting<<<blocks, 256>>>(state, ++epoch, all_wait); });
    }
  }
  CHECK(cudaMemset(state, 0, 4096));
  epoch = 0;
  for (int blocks : {32, 128}) {
    for (bool all_wait : {false, true}) {
      char name[64];
      std::snprintf(name, sizeof name, "per-block %s %dx256", all_wait ? "all-wait" : "one-wait", blocks);
      time_kernel(name, [&](int) { per_block_meeting<<<blocks, 256>>>(state, ++epoch, all_wait); });
    }
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  return 0;
}
