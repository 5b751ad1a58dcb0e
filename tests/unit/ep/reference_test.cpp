// The reference semantics: each token reaches each destination rank once,
// rows travel unchanged, the identity-expert check holds exactly, quantized
// contributions stay within the fp8 rounding bound, the standard-MoE layout
// lists every (token, local expert) pair, and bad inputs are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "epjit/ep/reference.h"
#include "epjit/error.h"
#include "epjit/numerics.h"

namespace epjit::ep::reference {
namespace {

EpDispatchCombineConfig config(int world, int hidden, int experts_per_rank, int topk, int max_tokens) {
  EpDispatchCombineConfig c;
  c.rank = 0;
  c.world_size = world;
  c.hidden_dim = hidden;
  c.max_num_inp_token_per_rank = max_tokens;
  c.num_experts_per_rank = experts_per_rank;
  c.num_experts_per_token = topk;
  c.scale_dim = 3;
  c.scale_type_size = 4;
  c.target = "host-gfx950";
  c.validate();
  return c;
}

enum class Routing { Uniform, Skewed };

std::vector<RankInput> randomInputs(const EpDispatchCombineConfig& c, const std::vector<int>& tokens, Routing routing,
                                    uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<RankInput> inputs(size_t(c.world_size));
  for (int r = 0; r < c.world_size; ++r) {
    RankInput& in = inputs[size_t(r)];
    in.tokens = tokens[size_t(r)];
    in.payload.resize(size_t(in.tokens) * c.dispatch_token_bytes());
    for (size_t i = 0; i + 1 < in.payload.size(); i += 2) {
      const uint16_t bits = encode_bf16(normal(rng));
      std::memcpy(&in.payload[i], &bits, 2);
    }
    in.weights.resize(size_t(in.tokens) * c.num_experts_per_token);
    for (float& w : in.weights) w = normal(rng);
    in.scales.resize(size_t(in.tokens) * c.scale_bytes_per_token());
    for (uint8_t& s : in.scales) s = uint8_t(rng());
    in.indices.resize(size_t(in.tokens) * c.num_experts_per_token);
    for (int32_t& e : in.indices)
      e = routing == Routing::Skewed ? int32_t(rng() % uint32_t(c.num_experts_per_rank))  // everything to rank 0
                                     : int32_t(rng() % uint32_t(c.num_experts()));
  }
  return inputs;
}

// The identity expert: every rank returns what it received.
std::vector<std::vector<std::vector<uint8_t>>> identityOutputs(const std::vector<std::vector<ReceivedToken>>& received) {
  std::vector<std::vector<std::vector<uint8_t>>> outputs(received.size());
  for (size_t d = 0; d < received.size(); ++d)
    for (const ReceivedToken& token : received[d]) outputs[d].push_back(token.payload);
  return outputs;
}

struct Shape {
  int world, hidden, experts_per_rank, topk;
  std::vector<int> tokens;
  Routing routing;
};

class ReferenceShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(ReferenceShapes, EachTokenReachesEachDestinationOnceAndTheIdentityCheckHolds) {
  const Shape s = GetParam();
  const int max_tokens = *std::max_element(s.tokens.begin(), s.tokens.end());
  const EpDispatchCombineConfig c = config(s.world, s.hidden, s.experts_per_rank, s.topk, std::max(1, max_tokens));
  const std::vector<RankInput> inputs = randomInputs(c, s.tokens, s.routing, 11);
  const auto received = dispatch(c, inputs);

  for (int d = 0; d < s.world; ++d) {
    std::set<std::pair<int, int>> seen;
    for (const ReceivedToken& token : received[size_t(d)]) {
      EXPECT_TRUE(seen.insert({token.source_rank, token.source_token}).second) << "a token arrived twice at " << d;
      const RankInput& in = inputs[size_t(token.source_rank)];
      const int32_t* experts = &in.indices[size_t(token.source_token) * s.topk];
      const auto ranks = destinations(c, experts);
      EXPECT_NE(std::find(ranks.begin(), ranks.end(), d), ranks.end()) << "a token went to a rank without its experts";
      EXPECT_EQ(0, std::memcmp(token.payload.data(), &in.payload[size_t(token.source_token) * c.dispatch_token_bytes()],
                               c.dispatch_token_bytes()));
      EXPECT_EQ(token.weights, std::vector<float>(&in.weights[size_t(token.source_token) * s.topk],
                                                  &in.weights[size_t(token.source_token + 1) * s.topk]));
      EXPECT_EQ(token.scales.size(), c.scale_bytes_per_token());
    }
    if (s.routing == Routing::Skewed && d > 0) EXPECT_TRUE(received[size_t(d)].empty());
  }
  size_t expected_total = 0;
  for (int r = 0; r < s.world; ++r)
    for (int t = 0; t < s.tokens[size_t(r)]; ++t)
      expected_total += destinations(c, &inputs[size_t(r)].indices[size_t(t) * s.topk]).size();
  size_t total = 0;
  for (const auto& list : received) total += list.size();
  EXPECT_EQ(total, expected_total);

  // combine(dispatch(x))[t] == U[t] * x[t], U[t] the number of distinct destination ranks.
  const auto combined = combine(c, received, identityOutputs(received), inputs);
  for (int r = 0; r < s.world; ++r) {
    for (int t = 0; t < s.tokens[size_t(r)]; ++t) {
      const float u = float(destinations(c, &inputs[size_t(r)].indices[size_t(t) * s.topk]).size());
      for (int i = 0; i < s.hidden; ++i) {
        uint16_t x, y;
        std::memcpy(&x, &inputs[size_t(r)].payload[(size_t(t) * s.hidden + i) * 2], 2);
        std::memcpy(&y, &combined[size_t(r)][(size_t(t) * s.hidden + i) * 2], 2);
        ASSERT_EQ(y, encode_bf16(u * decode_bf16(x))) << "rank " << r << " token " << t << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceShapes,
    ::testing::Values(Shape{1, 320, 8, 1, {37}, Routing::Uniform}, Shape{2, 7168, 128, 8, {37, 1}, Routing::Uniform},
                      Shape{4, 320, 64, 3, {0, 1, 37, 5}, Routing::Uniform},
                      Shape{8, 320, 32, 8, {3, 37, 1, 0, 16, 9, 2, 37}, Routing::Uniform},
                      Shape{4, 320, 16, 8, {37, 37, 37, 37}, Routing::Skewed}));

TEST(Reference, QuantizedContributionsStayWithinTheFp8Bound) {
  EpDispatchCombineConfig c = config(4, 320, 16, 4, 37);
  c.combine_mode = CombineMode::Scatter;
  for (QuantType quant : {QuantType::Fp8DirectCast, QuantType::Fp8Blockwise}) {
    c.quant_type = quant;
    c.validate();
    const auto inputs = randomInputs(c, {37, 5, 0, 12}, Routing::Uniform, 5);
    const auto received = dispatch(c, inputs);
    const auto combined = combine(c, received, identityOutputs(received), inputs);
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t < inputs[size_t(r)].tokens; ++t) {
        const float u = float(destinations(c, &inputs[size_t(r)].indices[size_t(t) * 4]).size());
        for (int i = 0; i < 320; ++i) {
          uint16_t x, y;
          std::memcpy(&x, &inputs[size_t(r)].payload[(size_t(t) * 320 + i) * 2], 2);
          std::memcpy(&y, &combined[size_t(r)][(size_t(t) * 320 + i) * 2], 2);
          const double exact = double(u) * decode_bf16(x);
          // Per contribution, e4m3's half ulp: 2^-4 relative, or 2^-10 absolute in its
          // subnormal range (step 2^-9); then one bf16 rounding of the sum.
          const double bound = double(u) * (0.0625 * std::fabs(decode_bf16(x)) + 0.0009765625) +
                               std::fabs(exact) * 0.004 + 1e-6;
          EXPECT_LE(std::fabs(decode_bf16(y) - exact), bound)
              << name_of(quant) << " rank " << r << " token " << t << " element " << i;
        }
      }
    }
  }
}

TEST(Reference, StdMoeLayoutListsEveryTokenLocalExpertPair) {
  const EpDispatchCombineConfig c = config(2, 320, 4, 3, 37);
  const auto inputs = randomInputs(c, {37, 20}, Routing::Uniform, 9);
  const auto received = dispatch(c, inputs);
  for (int d = 0; d < 2; ++d) {
    const StdMoeLayout layout = std_moe_layout(c, d, received[size_t(d)]);
    size_t pairs = 0;
    for (const ReceivedToken& token : received[size_t(d)]) {
      std::set<int> local;
      for (int32_t e : token.indices)
        if (e / 4 == d) local.insert(e % 4);
      pairs += local.size();
    }
    size_t listed = 0;
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(layout.counts[size_t(e)], int(layout.received_index[size_t(e)].size()));
      listed += layout.received_index[size_t(e)].size();
      for (int i : layout.received_index[size_t(e)]) {
        const auto& indices = received[size_t(d)][size_t(i)].indices;
        EXPECT_NE(std::find(indices.begin(), indices.end(), d * 4 + e), indices.end());
      }
    }
    EXPECT_EQ(listed, pairs);
  }
}

TEST(Reference, BadInputsAreErrors) {
  const EpDispatchCombineConfig c = config(2, 320, 4, 2, 8);
  auto inputs = randomInputs(c, {3, 3}, Routing::Uniform, 1);
  inputs[1].indices[4] = 8;  // 2 ranks x 4 experts: 8 is out of range
  try {
    dispatch(c, inputs);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("routes to expert 8"), std::string::npos) << error.what();
  }
  inputs = randomInputs(c, {9, 3}, Routing::Uniform, 1);
  EXPECT_THROW(dispatch(c, inputs), Error);  // over capacity
}

}  // namespace
}  // namespace epjit::ep::reference
