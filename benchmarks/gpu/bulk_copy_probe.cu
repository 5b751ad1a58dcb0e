// Whether Hopper's bulk copy engine (cp.async.bulk, global -> shared ->
// global, completing on an mbarrier) moves dispatch's rows faster than the
// copy the templates lower to today (issue 13, item 6: "TMA bulk copies, only
// where measured to help on sm90").
//
// The work is dispatch's: `rows` rows of `row_bytes` (DeepSeek-V3's bf16 row,
// 14336 bytes), each copied to a slot of a destination buffer picked by a
// fixed permutation. Three ways:
//   lsu   a warp per row, each lane with 8 (what sm90's ep.lane.copy_chunks
//         keeps today: ld.global.nc.v4, st.global.v4), 16 or 28 (a whole bf16
//         row) 16-byte loads in flight before its stores
//   bulk  lane 0 of each warp streams the warp's rows through `stages` shared
//         buffers of `piece` bytes: a bulk load per piece, `stages - 1` of them
//         ahead, each piece stored by a bulk store once its load completes
//   ce    cudaMemcpyAsync of the whole buffer (the copy engine; no
//         permutation), for the bandwidth scale
// The destination is this GPU's memory, or with two GPUs also GPU 1's
// (peer access over NVLink): dispatch's remote writes. Every copy is checked
// byte for byte before it is timed. Build and run on the GPU host:
//   nvcc -O3 -arch=sm_90 -o bulk_copy_probe bulk_copy_probe.cu && ./bulk_copy_probe
// Results and their record: docs/PERFORMANCE.md.
#include <cuda_runtime.h>

#include "cuda_check.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

struct alignas(16) Vec16 {
  uint32_t w[4];
};

__device__ __forceinline__ Vec16 load_nc(const void* p) {
  Vec16 v;
  asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p));
  return v;
}
__device__ __forceinline__ void store_v4(void* p, const Vec16& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]),
               "r"(v.w[3])
               : "memory");
}

// ---------------------------------------------------------------- lsu

template <int kUnroll>
__global__ void __launch_bounds__(512, 1)
    copy_rows_lsu(const char* src, char* dst, const int* slot_of_row, int rows, int row_bytes) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  const int chunks = row_bytes / 16;
  for (int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const char* from = src + size_t(row) * row_bytes;
    char* to = dst + size_t(slot_of_row[row]) * row_bytes;
    for (int base = 0; base < chunks; base += 32 * kUnroll) {
      Vec16 held[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int chunk = base + k * 32 + lane;
        if (chunk < chunks) held[k] = load_nc(from + size_t(chunk) * 16);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int chunk = base + k * 32 + lane;
        if (chunk < chunks) store_v4(to + size_t(chunk) * 16, held[k]);
      }
    }
  }
}

// ---------------------------------------------------------------- bulk

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bulk_load(uint32_t to, const void* from, uint32_t bytes, uint32_t barrier) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(to),
               "l"(from), "r"(bytes), "r"(barrier)
               : "memory");
}
__device__ __forceinline__ void wait_barrier(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_store(void* to, uint32_t from, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(to), "r"(from), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// At most `kPending` of this thread's bulk stores still reading shared memory.
template <int kPending>
__device__ __forceinline__ void wait_stores_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Dynamic shared memory: per warp, `stages` buffers of `piece` bytes; then
// per warp, `stages` mbarriers.
__global__ void __launch_bounds__(512, 1)
    copy_rows_bulk(const char* src, char* dst, const int* slot_of_row, int rows, int row_bytes, int piece,
                   int stages) {
  extern __shared__ __align__(128) char shared[];
  const int warp = threadIdx.x / 32;
  const int warps_per_block = blockDim.x / 32;
  if (threadIdx.x % 32 != 0) return;
  char* buffers = shared + size_t(warp) * stages * piece;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(shared + size_t(warps_per_block) * stages * piece) + warp * stages;
  for (int s = 0; s < stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barriers + s)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");

  // The warp's pieces in order: row r = first + i * warps, piece p of it.
  const int warps = gridDim.x * warps_per_block;
  const int first = blockIdx.x * warps_per_block + warp;
  const int pieces_per_row = (row_bytes + piece - 1) / piece;
  const int my_rows = first < rows ? (rows - first + warps - 1) / warps : 0;
  const long total = long(my_rows) * pieces_per_row;
  auto piece_at = [&](long i, const char*& from, char*& to, uint32_t& bytes) {
    const int row = first + int(i / pieces_per_row) * warps;
    const int offset = int(i % pieces_per_row) * piece;
    bytes = uint32_t(row_bytes - offset < piece ? row_bytes - offset : piece);
    from = src + size_t(row) * row_bytes + offset;
    to = dst + size_t(slot_of_row[row]) * row_bytes + offset;
  };
  auto issue_load = [&](long i) {
    const char* from;
    char* to;
    uint32_t bytes;
    piece_at(i, from, to, bytes);
    const int s = int(i % stages);
    bulk_load(shared_address(buffers + size_t(s) * piece), from, bytes, shared_address(barriers + s));
  };
  for (long i = 0; i < stages - 1 && i < total; ++i) issue_load(i);
  for (long i = 0; i < total; ++i) {
    const int s = int(i % stages);
    wait_barrier(shared_address(barriers + s), uint32_t((i / stages) & 1));
    const char* from;
    char* to;
    uint32_t bytes;
    piece_at(i, from, to, bytes);
    bulk_store(to, shared_address(buffers + size_t(s) * piece), bytes);
    const long ahead = i + stages - 1;
    if (ahead < total) {
      // Its buffer held piece i - 1, whose store is the one before piece i's.
      wait_stores_read<1>();
      issue_load(ahead);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---------------------------------------------------------------- host

struct Timing {
  float us;
  double gbps;
};

template <typename Launch>
Timing time_it(Launch launch, size_t bytes, int iters) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();
  CHECK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) launch();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  const float us = ms * 1000.0f / iters;
  return {us, bytes / (us * 1e-6) / 1e9};
}

// The destination, read back, against the source moved by the permutation.
bool copied_exactly(const std::vector<char>& source, char* dst_device, const std::vector<int>& slot_of_row, int rows,
                    int row_bytes) {
  std::vector<char> got(size_t(rows) * row_bytes);
  CHECK(cudaMemcpy(got.data(), dst_device, got.size(), cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; ++r)
    if (std::memcmp(got.data() + size_t(slot_of_row[r]) * row_bytes, source.data() + size_t(r) * row_bytes,
                    row_bytes) != 0)
      return false;
  return true;
}

int main(int argc, char** argv) {
  const int row_bytes = argc > 1 ? std::atoi(argv[1]) : 7168 * 2;
  const int iters = 50;
  int devices = 0, sms = 0;
  CHECK(cudaGetDeviceCount(&devices));
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int peer_ok = 0;
  if (devices > 1) CHECK(cudaDeviceCanAccessPeer(&peer_ok, 0, 1));
  if (peer_ok) CHECK(cudaDeviceEnablePeerAccess(1, 0));
  std::printf("row %d bytes, %d SMs, %d GPUs, peer destination %s\n", row_bytes, sms, devices,
              peer_ok ? "GPU 1" : "none (one GPU)");

  const int max_rows = 8192;
  const size_t bytes = size_t(max_rows) * row_bytes;
  std::vector<char> source(bytes);
  uint64_t state = 1;
  for (auto& c : source) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    c = char(state >> 56);
  }
  char *src = nullptr, *dst_local = nullptr, *dst_peer = nullptr;
  int* slots = nullptr;
  CHECK(cudaMalloc(&src, bytes));
  CHECK(cudaMalloc(&dst_local, bytes));
  CHECK(cudaMemcpy(src, source.data(), bytes, cudaMemcpyHostToDevice));
  if (peer_ok) {
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&dst_peer, bytes));
    CHECK(cudaSetDevice(0));
  }
  CHECK(cudaMalloc(&slots, max_rows * sizeof(int)));

  struct BulkShape {
    int warps, piece, stages;
  };
  const BulkShape bulk_shapes[] = {{4, 14336, 2}, {4, 7168, 3}, {4, 4096, 4}, {8, 7168, 2},
                                   {8, 4096, 3},  {8, 3584, 4}, {16, 3584, 2}, {16, 2048, 3}};
  int max_shared = 0;
  CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(cudaFuncSetAttribute(copy_rows_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared));

  const int row_counts[] = {1, 8, 128, 1024, 4096, 8192};
  for (char* dst : {dst_local, dst_peer}) {
    if (!dst) continue;
    std::printf("\n== destination: %s\n", dst == dst_local ? "this GPU" : "GPU 1 (NVLink)");
    std::printf("%-22s", "rows");
    for (int rows : row_counts) std::printf(" %14d", rows);
    std::printf("\n");
    auto line = [&](const char* name, auto launch) {
      std::printf("%-22s", name);
      for (int rows : row_counts) {
        // Slots: a fixed permutation of the rows (odd stride through them).
        std::vector<int> slot_of_row(rows);
        for (int r = 0; r < rows; ++r) slot_of_row[r] = int((long(r) * 7919) % rows);
        CHECK(cudaMemcpy(slots, slot_of_row.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaMemset(dst, 0xA5, size_t(rows) * row_bytes));
        launch(rows);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        if (!copied_exactly(source, dst, slot_of_row, rows, row_bytes)) {
          std::printf(" %14s", "WRONG");
          continue;
        }
        const Timing t = time_it([&] { launch(rows); }, size_t(rows) * row_bytes, iters);
        std::printf(" %6.1f/%5.0fGB", t.us, t.gbps);
      }
      std::printf("\n");
      std::fflush(stdout);
    };
    auto lsu = [&](auto unroll) {
      constexpr int kUnroll = decltype(unroll)::value;
      char name[64];
      std::snprintf(name, sizeof name, "lsu %dx16w %d in flight", sms, kUnroll);
      line(name, [&](int rows) { copy_rows_lsu<kUnroll><<<sms, 512>>>(src, dst, slots, rows, row_bytes); });
    };
    lsu(std::integral_constant<int, 8>{});
    lsu(std::integral_constant<int, 16>{});
    lsu(std::integral_constant<int, 28>{});
    for (const BulkShape& shape : bulk_shapes) {
      const size_t shared_bytes = size_t(shape.warps) * shape.stages * (shape.piece + 8);
      if (shared_bytes > size_t(max_shared)) continue;
      char name[64];
      std::snprintf(name, sizeof name, "bulk %dw %dB x%d", shape.warps, shape.piece, shape.stages);
      line(name, [&](int rows) {
        copy_rows_bulk<<<sms, shape.warps * 32, shared_bytes>>>(src, dst, slots, rows, row_bytes, shape.piece,
                                                                  shape.stages);
      });
    }
    std::printf("%-22s", "ce (no permutation)");
    for (int rows : row_counts) {
      const Timing t = time_it([&] { CHECK(cudaMemcpyAsync(dst, src, size_t(rows) * row_bytes, cudaMemcpyDefault)); },
                               size_t(rows) * row_bytes, iters);
      std::printf(" %6.1f/%5.0fGB", t.us, t.gbps);
    }
    std::printf("\n");
  }
  return 0;
}
