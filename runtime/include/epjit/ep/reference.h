// The reference semantics of dispatch, combine and the standard-MoE layout,
// over every rank's inputs at once: plain C++, used only as the oracle of the
// tests (the host target runs the generated kernels, never this).
//
// Received tokens are keyed by (source rank, source token) and listed in that
// order, so comparisons do not depend on the slot order atomics produce.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "epjit/ep/config.h"

namespace epjit::ep::reference {

// One rank's dispatch inputs (row-major).
struct RankInput {
  int tokens = 0;
  // As the rank's dispatch passed it (DispatchOptions): internode auto then
  // picks v2 or v2_ll by it instead of `tokens`.
  std::optional<int64_t> max_tokens_across_ranks;
  int64_t tokens_auto_picks_by() const { return max_tokens_across_ranks.value_or(tokens); }
  std::vector<uint8_t> payload;  // tokens * dispatch_token_bytes
  std::vector<float> weights;    // tokens * top-k
  std::vector<uint8_t> scales;   // tokens * scale_bytes_per_token (opaque)
  std::vector<int32_t> indices;  // tokens * top-k, experts in [0, num_experts)
};

struct ReceivedToken {
  int source_rank = 0;
  int source_token = 0;
  std::vector<uint8_t> payload;
  std::vector<float> weights;
  std::vector<uint8_t> scales;
  std::vector<int32_t> indices;
};

// Element i of a dispatched row (config.dispatch_type(): bf16, f32, the
// target's fp8 e4m3, or FP4 two to a byte, low nibble first) as f32.
float dispatched_element(const EpDispatchCombineConfig& config, const uint8_t* row, size_t i);
// Stores `value` as element i of a dispatched row, in that type (bf16
// rounded to nearest even, fp8 and FP4 saturated; FP4's other nibble kept).
void store_dispatched_element(const EpDispatchCombineConfig& config, uint8_t* row, size_t i, float value);

// What a test's expert returns for a received row: each element decoded,
// times `factor`, stored in the combine leg's type (bf16 rounded to nearest
// even, or f32). A factor of 1 is the identity expert.
std::vector<uint8_t> scaled_expert_output(const EpDispatchCombineConfig& config, const uint8_t* row, float factor);

// What the combine leg's transport does to one contribution row under
// config.quant_type: the target's fp8, direct cast or blockwise 128 (identity for none).
std::vector<float> through_quantization(const EpDispatchCombineConfig& config, std::vector<float> row);

// The ranks a token goes to: its experts' ranks, each once, in order of first appearance.
std::vector<int> destinations(const EpDispatchCombineConfig& config, const int32_t* experts);

// What each rank receives. Throws epjit::Error for an expert index out of range
// or more tokens than max_num_inp_token_per_rank.
std::vector<std::vector<ReceivedToken>> dispatch(const EpDispatchCombineConfig& config,
                                                 const std::vector<RankInput>& inputs);

// The order a combine sums an origin token's contributions in: groups of
// destinations, each summed in f32 in the order listed (the first taken as
// is, so a -0 keeps its sign), then the groups' sums added in f32 in order.
// One group, the destinations, except for a call that runs internode v2
// (config.runs_internode_v2(tokens), `tokens` the count auto picks by:
// RankInput::tokens_auto_picks_by()): then the origin's own node's
// destinations first (when it has any), then each other node's, nodes in the
// order their first destination appears (docs/EP.md "Internode").
std::vector<std::vector<int>> summation_groups(const EpDispatchCombineConfig& config, int rank, int64_t tokens,
                                               const int32_t* experts);

// The combined weights of one token (top-k f32): its weights summed over
// its destinations in summation_groups() order.
std::vector<float> combined_weights(const EpDispatchCombineConfig& config, int rank, int64_t tokens,
                                    const int32_t* experts, const float* weights);

// Combine: every origin token's sum over its destinations of that
// destination's expert-output row for it, summed in f32 in
// summation_groups() order and rounded once to the combine type. `outputs[d][i]` is rank d's
// row (hidden elements of combine_type, or f32 rows when the type is f32) for
// its i-th received token in dispatch()'s order. Under quant_type, each
// contribution is quantized to the target's fp8 (direct cast, or blockwise
// 128 with f32 scales) and dequantized before the sum, as scatter combine sends it.
// Returns, per rank, tokens * hidden values of the combine type as raw bytes.
std::vector<std::vector<uint8_t>> combine(const EpDispatchCombineConfig& config,
                                          const std::vector<std::vector<ReceivedToken>>& received,
                                          const std::vector<std::vector<std::vector<uint8_t>>>& outputs,
                                          const std::vector<RankInput>& inputs);

// The standard-MoE layout of one rank's received tokens: for each local expert
// e, the tokens routed to it (in dispatch()'s order), with the source map.
struct StdMoeLayout {
  std::vector<int> counts;                               // per local expert
  std::vector<std::vector<int>> received_index;          // per local expert: index into received
};
StdMoeLayout std_moe_layout(const EpDispatchCombineConfig& config, int rank,
                            const std::vector<ReceivedToken>& received);

// std_moe_combine = weighted_entries (DeepEP's low-latency combine): each of
// `input`'s tokens is +0.0 plus, for each top-k entry k that names an expert,
// in top-k order, fma(row_k[h], weights[k], acc) in f32, rounded once to bf16;
// row_k = expert_row(expert, the token's dispatched row), hidden bf16 bits.
// Returns tokens * hidden bf16 values as raw bytes.
std::vector<uint8_t> weighted_entries_combine(
    const EpDispatchCombineConfig& config, const RankInput& input,
    const std::function<std::vector<uint16_t>(int32_t expert, const uint8_t* row)>& expert_row);

}  // namespace epjit::ep::reference
