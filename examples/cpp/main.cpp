// Two ranks on CPU threads dispatch random tokens to experts and combine them
// back with identity experts: each token must come back as the sum of its
// copies, one per distinct destination rank, and its weights likewise. The
// kernels are generated from the DSL in this process (the installed compiler
// provider, a cache kept in memory), then run on the host target.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/ep/op.h"

namespace {

constexpr int kWorld = 2;
constexpr int kHidden = 200;
constexpr int kTopk = 3;
constexpr int kExpertsPerRank = 4;
constexpr int kMaxTokens = 19;

// Runs one rank; returns "" or what went wrong.
std::string run_rank(int rank, const epjit::UniqueId& id, epjit::KernelCache& cache) {
  using namespace epjit;
  using namespace epjit::ep;
  auto device = make_host_device();
  auto comm = Communicator::init(kWorld, rank, id, *device);

  EpDispatchCombineConfig config;
  config.rank = rank;
  config.world_size = kWorld;
  config.hidden_dim = kHidden;
  config.max_num_inp_token_per_rank = kMaxTokens;
  config.num_experts_per_rank = kExpertsPerRank;
  config.num_experts_per_token = kTopk;
  config.data_type = DataType::F32;
  EpDispatchCombineOp op(config, *comm, {.cache = &cache});

  std::mt19937 rng(2026 + rank);
  const int64_t tokens = kMaxTokens - rank;  // ranks send different counts
  std::vector<float> x(size_t(tokens) * kHidden), weights(size_t(tokens) * kTopk);
  std::vector<int32_t> indices(size_t(tokens) * kTopk);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> expert(0, kWorld * kExpertsPerRank - 1);
  for (float& v : x) v = normal(rng);
  for (float& v : weights) v = normal(rng);
  for (int64_t t = 0; t < tokens; ++t)  // distinct experts per token
    for (int j = 0; j < kTopk; ++j) {
      int32_t e;
      do e = expert(rng);
      while (std::find(&indices[size_t(t * kTopk)], &indices[size_t(t * kTopk + j)], e) != &indices[size_t(t * kTopk + j)]);
      indices[size_t(t * kTopk + j)] = e;
    }

  auto upload = [&](const auto& host, DType dtype, std::vector<int64_t> shape) {
    const size_t bytes = host.size() * sizeof(host[0]);
    void* data = device->allocate(bytes);
    device->copy_to_device(data, host.data(), bytes);
    return TensorRef{data, dtype, std::move(shape)};
  };
  const TensorRef x_ref = upload(x, DType::F32, {tokens, kHidden});
  const TensorRef w_ref = upload(weights, DType::F32, {tokens, kTopk});
  const TensorRef i_ref = upload(indices, DType::I32, {tokens, kTopk});

  const DispatchResult d = op.dispatch(x_ref, w_ref, std::nullopt, i_ref);
  op.check();
  int32_t received = 0;
  device->copy_to_host(&received, d.total_recv.data, 4);
  // Identity experts: each received row is its own expert output. Combine
  // takes the whole receive buffer ([capacity, ...]); rows past `received` are ignored.
  const int64_t capacity = d.tokens.shape[0];
  std::vector<float> rows(size_t(capacity) * kHidden), received_weights(size_t(capacity) * kTopk);
  device->copy_to_host(rows.data(), d.tokens.data, size_t(received) * kHidden * 4);
  device->copy_to_host(received_weights.data(), d.weights.data, size_t(received) * kTopk * 4);
  const TensorRef expert_out = upload(rows, DType::F32, {capacity, kHidden});
  const TensorRef expert_weights = upload(received_weights, DType::F32, {capacity, kTopk});
  const CombineResult c = op.combine(expert_out, expert_weights);
  op.check();
  std::vector<float> out(x.size()), out_weights(weights.size());
  device->copy_to_host(out.data(), c.tokens.data, out.size() * 4);
  device->copy_to_host(out_weights.data(), c.weights.data, out_weights.size() * 4);

  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int> ranks;
    for (int j = 0; j < kTopk; ++j) {
      const int r = indices[size_t(t * kTopk + j)] / kExpertsPerRank;
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
    auto sum_of_copies = [&](float v) {  // the first copy, then the others added in order
      float s = v;
      for (size_t k = 1; k < ranks.size(); ++k) s += v;
      return s;
    };
    for (int i = 0; i < kHidden; ++i)
      if (out[size_t(t * kHidden + i)] != sum_of_copies(x[size_t(t * kHidden + i)]))
        return "rank " + std::to_string(rank) + ": token " + std::to_string(t) + " element " + std::to_string(i) +
               " is " + std::to_string(out[size_t(t * kHidden + i)]);
    for (int j = 0; j < kTopk; ++j)
      if (out_weights[size_t(t * kTopk + j)] != sum_of_copies(weights[size_t(t * kTopk + j)]))
        return "rank " + std::to_string(rank) + ": token " + std::to_string(t) + " weight " + std::to_string(j);
  }
  std::printf("rank %d: %lld tokens sent, %d received, all combined back exactly\n", rank, (long long)tokens,
              received);
  op.close();
  for (const TensorRef* ref : {&x_ref, &w_ref, &i_ref, &expert_out, &expert_weights}) device->release(ref->data);
  return "";
}

}  // namespace

int main() {
  try {
    // A cache in memory only: every kernel is generated from the DSL here.
    epjit::KernelCache cache(epjit::CacheOptions{});
    const epjit::UniqueId id = epjit::Communicator::get_unique_id();
    std::vector<std::string> failures(kWorld);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < kWorld; ++rank)
      ranks.emplace_back([&, rank] {
        try {
          failures[size_t(rank)] = run_rank(rank, id, cache);
        } catch (const std::exception& error) {
          failures[size_t(rank)] = "rank " + std::to_string(rank) + " threw: " + error.what();
        }
      });
    for (std::thread& rank : ranks) rank.join();
    int failed = 0;
    for (const std::string& failure : failures)
      if (!failure.empty()) std::fprintf(stderr, "%s\n", failure.c_str()), ++failed;
    const epjit::CacheStats stats = cache.stats();
    std::printf("kernels: %llu sources generated, %llu compiled (%.2f s)\n",
                (unsigned long long)stats.sources_generated, (unsigned long long)stats.compiles, stats.compile_seconds);
    if (stats.sources_generated == 0) {
      std::fprintf(stderr, "no kernel source was generated: the compiler provider was not used\n");
      return 1;
    }
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "epjit_example: %s\n", error.what());
    return 1;
  }
}
