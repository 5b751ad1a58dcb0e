#include "epjit/ep/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "epjit/error.h"
#include "epjit/numerics.h"

namespace epjit::ep::reference {
namespace {

float load(DataType type, const uint8_t* row, size_t i) {
  if (type == DataType::F32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, row + 2 * i, 2);
  return decode_bf16(bits);
}

void store(DataType type, uint8_t* row, size_t i, float value) {
  if (type == DataType::F32) {
    std::memcpy(row + 4 * i, &value, 4);
  } else {
    const uint16_t bits = encode_bf16(value);
    std::memcpy(row + 2 * i, &bits, 2);
  }
}

// `values(d)` is destination d's contribution (count elements); the sum in
// summation_groups() order, in f32. No destination: zeros.
template <typename Contribution>
std::vector<float> grouped_sum(const std::vector<std::vector<int>>& groups, size_t count, Contribution values) {
  std::vector<float> total;
  for (const std::vector<int>& group : groups) {
    std::vector<float> partial;
    for (int d : group) {
      std::vector<float> term = values(d);
      // The first contribution is taken as is (0 + -0 would lose a sign).
      if (partial.empty()) partial = std::move(term);
      else for (size_t i = 0; i < count; ++i) partial[i] += term[i];
    }
    if (partial.empty()) continue;
    if (total.empty()) total = std::move(partial);
    else for (size_t i = 0; i < count; ++i) total[i] += partial[i];
  }
  if (total.empty()) total.assign(count, 0.0f);
  return total;
}

}  // namespace

float dispatched_element(const EpDispatchCombineConfig& config, const uint8_t* row, size_t i) {
  switch (config.dispatch_type()) {
    case DataType::BF16:
    case DataType::F32: return load(config.dispatch_type(), row, i);
    case DataType::FP8: return decode_fp8(row[i], config.target_info().fp8_e4m3);
    case DataType::FP4: return decode_fp4_e2m1(uint8_t((row[i / 2] >> (4 * (i % 2))) & 0xF));
  }
  return 0;
}

void store_dispatched_element(const EpDispatchCombineConfig& config, uint8_t* row, size_t i, float value) {
  switch (config.dispatch_type()) {
    case DataType::BF16:
    case DataType::F32: return store(config.dispatch_type(), row, i, value);
    case DataType::FP8: row[i] = encode_fp8(value, config.target_info().fp8_e4m3, Overflow::Saturate); return;
    case DataType::FP4: {
      const unsigned shift = 4 * (i % 2);
      row[i / 2] = uint8_t((row[i / 2] & ~(0xF << shift)) | (encode_fp4_e2m1(value) << shift));
      return;
    }
  }
}

std::vector<uint8_t> scaled_expert_output(const EpDispatchCombineConfig& config, const uint8_t* row, float factor) {
  const size_t hidden = size_t(config.hidden_dim);
  std::vector<uint8_t> out(config.combine_token_bytes());
  for (size_t i = 0; i < hidden; ++i) store(config.combine_type(), out.data(), i, dispatched_element(config, row, i) * factor);
  return out;
}

std::vector<float> through_quantization(const EpDispatchCombineConfig& config, std::vector<float> row) {
  const Fp8Format format = config.target_info().fp8_e4m3;
  if (config.quant_type == QuantType::Fp8DirectCast) {
    for (float& v : row) v = decode_fp8(encode_fp8(v, format, Overflow::Saturate), format);
  } else if (config.quant_type == QuantType::Fp8Blockwise) {
    for (size_t start = 0; start < row.size(); start += kFp8BlockwiseBlockSize) {
      const size_t n = std::min<size_t>(kFp8BlockwiseBlockSize, row.size() - start);
      uint8_t codes[kFp8BlockwiseBlockSize];
      const float scale = quantize_fp8_block(&row[start], n, format, codes);
      dequantize_fp8_block(codes, n, format, scale, &row[start]);
    }
  }
  return row;
}

std::vector<int> destinations(const EpDispatchCombineConfig& config, const int32_t* experts) {
  std::vector<int> ranks;
  for (int j = 0; j < config.num_experts_per_token; ++j) {
    if (experts[j] == kNoExpert) continue;
    const int rank = experts[j] / config.num_experts_per_rank;
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
  }
  return ranks;
}

std::vector<std::vector<int>> summation_groups(const EpDispatchCombineConfig& config, int rank, int64_t tokens,
                                               const int32_t* experts) {
  const std::vector<int> ranks = destinations(config, experts);
  if (!config.runs_internode_v2(tokens)) return {ranks};
  const int per_node = config.nodes_gpu_count();
  std::vector<std::vector<int>> groups;
  std::vector<int> group_node;  // the node of each group
  std::vector<int> own;
  for (int d : ranks) {
    if (d / per_node == rank / per_node) {
      own.push_back(d);
      continue;
    }
    const auto it = std::find(group_node.begin(), group_node.end(), d / per_node);
    if (it == group_node.end()) {
      group_node.push_back(d / per_node);
      groups.push_back({d});
    } else {
      groups[size_t(it - group_node.begin())].push_back(d);
    }
  }
  if (!own.empty()) groups.insert(groups.begin(), own);
  return groups;
}

std::vector<float> combined_weights(const EpDispatchCombineConfig& config, int rank, int64_t tokens,
                                    const int32_t* experts, const float* weights) {
  const size_t k = size_t(config.num_experts_per_token);
  return grouped_sum(summation_groups(config, rank, tokens, experts), k,
                     [&](int) { return std::vector<float>(weights, weights + k); });
}

std::vector<std::vector<ReceivedToken>> dispatch(const EpDispatchCombineConfig& config,
                                                 const std::vector<RankInput>& inputs) {
  const int k = config.num_experts_per_token;
  const size_t token_bytes = config.dispatch_token_bytes(), scale_bytes = config.scale_bytes_per_token();
  std::vector<std::vector<ReceivedToken>> received(size_t(config.world_size));
  for (int r = 0; r < config.world_size; ++r) {
    const RankInput& in = inputs.at(size_t(r));
    if (in.tokens < 0 || in.tokens > config.max_num_inp_token_per_rank)
      throw Error("rank " + std::to_string(r) + " dispatches " + std::to_string(in.tokens) + " tokens",
                  "at most max_num_inp_token_per_rank = " + std::to_string(config.max_num_inp_token_per_rank),
                  "raise max_num_inp_token_per_rank or split the batch");
    for (int t = 0; t < in.tokens; ++t) {
      const int32_t* experts = &in.indices[size_t(t) * k];
      for (int j = 0; j < k; ++j)
        if (experts[j] != kNoExpert && (experts[j] < 0 || experts[j] >= config.num_experts()))
          throw Error("rank " + std::to_string(r) + " token " + std::to_string(t) + " routes to expert " +
                          std::to_string(experts[j]),
                      "an expert in [0, " + std::to_string(config.num_experts()) + "), or -1 for none",
                      "fix the router's indices");
      for (int d : destinations(config, experts)) {
        ReceivedToken token;
        token.source_rank = r;
        token.source_token = t;
        token.payload.assign(in.payload.begin() + long(t * token_bytes), in.payload.begin() + long((t + 1) * token_bytes));
        token.weights.assign(in.weights.begin() + long(t) * k, in.weights.begin() + long(t + 1) * k);
        if (scale_bytes)
          token.scales.assign(in.scales.begin() + long(t * scale_bytes), in.scales.begin() + long((t + 1) * scale_bytes));
        token.indices.assign(experts, experts + k);
        received[size_t(d)].push_back(std::move(token));
      }
    }
  }
  return received;
}

std::vector<std::vector<uint8_t>> combine(const EpDispatchCombineConfig& config,
                                          const std::vector<std::vector<ReceivedToken>>& received,
                                          const std::vector<std::vector<std::vector<uint8_t>>>& outputs,
                                          const std::vector<RankInput>& inputs) {
  const DataType type = config.combine_type();
  const size_t hidden = size_t(config.hidden_dim), row_bytes = config.combine_token_bytes();
  std::vector<std::vector<uint8_t>> result(size_t(config.world_size));
  for (int r = 0; r < config.world_size; ++r) {
    const int tokens = inputs.at(size_t(r)).tokens;
    std::vector<std::vector<float>> sums(static_cast<size_t>(tokens));
    for (int t = 0; t < tokens; ++t) {
      const int32_t* experts = &inputs[size_t(r)].indices[size_t(t) * size_t(config.num_experts_per_token)];
      sums[size_t(t)] = grouped_sum(summation_groups(config, r, inputs[size_t(r)].tokens_auto_picks_by(), experts),
                                    hidden, [&](int d) {
        const auto& list = received[size_t(d)];
        const auto it = std::find_if(list.begin(), list.end(), [&](const ReceivedToken& token) {
          return token.source_rank == r && token.source_token == t;
        });
        const std::vector<uint8_t>& row = outputs.at(size_t(d)).at(size_t(it - list.begin()));
        std::vector<float> contribution(hidden);
        for (size_t i = 0; i < hidden; ++i) contribution[i] = load(type, row.data(), i);
        return through_quantization(config, std::move(contribution));
      });
    }
    result[size_t(r)].assign(size_t(tokens) * row_bytes, 0);
    for (int t = 0; t < tokens; ++t)
      for (size_t i = 0; i < hidden; ++i) store(type, &result[size_t(r)][size_t(t) * row_bytes], i, sums[size_t(t)][i]);
  }
  return result;
}

StdMoeLayout std_moe_layout(const EpDispatchCombineConfig& config, int rank, const std::vector<ReceivedToken>& received) {
  StdMoeLayout layout;
  layout.counts.assign(size_t(config.num_experts_per_rank), 0);
  layout.received_index.resize(size_t(config.num_experts_per_rank));
  for (size_t i = 0; i < received.size(); ++i) {
    for (int32_t expert : received[i].indices) {
      if (expert == kNoExpert || expert / config.num_experts_per_rank != rank) continue;
      const int local = expert % config.num_experts_per_rank;
      auto& slots = layout.received_index[size_t(local)];
      if (std::find(slots.begin(), slots.end(), int(i)) != slots.end()) continue;  // top-k may repeat an expert
      slots.push_back(int(i));
      layout.counts[size_t(local)]++;
    }
  }
  return layout;
}

std::vector<uint8_t> weighted_entries_combine(
    const EpDispatchCombineConfig& config, const RankInput& input,
    const std::function<std::vector<uint16_t>(int32_t expert, const uint8_t* row)>& expert_row) {
  const size_t hidden = size_t(config.hidden_dim), k = size_t(config.num_experts_per_token);
  const size_t row_bytes = config.dispatch_token_bytes();
  std::vector<uint8_t> out(size_t(input.tokens) * hidden * 2);
  for (size_t t = 0; t < size_t(input.tokens); ++t) {
    std::vector<float> acc(hidden, 0.0f);
    for (size_t j = 0; j < k; ++j) {
      const int32_t expert = input.indices[t * k + j];
      if (expert < 0) continue;
      const std::vector<uint16_t> row = expert_row(expert, &input.payload[t * row_bytes]);
      const float weight = input.weights[t * k + j];
      for (size_t h = 0; h < hidden; ++h) acc[h] = std::fma(decode_bf16(row[h]), weight, acc[h]);
    }
    for (size_t h = 0; h < hidden; ++h) {
      const uint16_t bits = encode_bf16(acc[h]);
      std::memcpy(&out[(t * hidden + h) * 2], &bits, 2);
    }
  }
  return out;
}

}  // namespace epjit::ep::reference
