// EpDispatchCombineConfig: every validation rule of SEED-NOTES.md has a case
// that triggers it, with a message naming the field, the value and the rule;
// derived properties and the schedule.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "epjit/ep/config.h"
#include "epjit/error.h"

namespace epjit::ep {
namespace {

// A valid intranode EP8 configuration on gfx950 (DeepSeek-V3-like).
EpDispatchCombineConfig valid() {
  EpDispatchCombineConfig c;
  c.rank = 3;
  c.world_size = 8;
  c.hidden_dim = 7168;
  c.max_num_inp_token_per_rank = 4096;
  c.num_experts_per_rank = 32;
  c.num_experts_per_token = 8;
  c.target = "gfx950";
  return c;
}

struct Rule {
  const char* name;
  std::function<void(EpDispatchCombineConfig&)> breakIt;
  std::vector<const char*> mentions;  // field, value and rule words the message must hold
};

const Rule kRules[] = {
    {"rank_in_range", [](auto& c) { c.rank = 8; }, {"rank = 8", "[0, world_size = 8)"}},
    {"world_size_required", [](auto& c) { c.world_size = 0; }, {"world_size = 0", "required"}},
    {"hidden_required", [](auto& c) { c.hidden_dim = 0; }, {"hidden_dim = 0", "required"}},
    {"tokens_required", [](auto& c) { c.max_num_inp_token_per_rank = -1; }, {"max_num_inp_token_per_rank = -1"}},
    {"experts_required", [](auto& c) { c.num_experts_per_rank = 0; }, {"num_experts_per_rank = 0"}},
    {"topk_required", [](auto& c) { c.num_experts_per_token = 0; }, {"num_experts_per_token = 0"}},
    {"topk_at_most_experts",
     [](auto& c) {
       c.num_experts_per_rank = 1;
       c.num_experts_per_token = 9;
     },
     {"num_experts_per_token = 9", "cannot exceed", "= 8"}},
    {"dtypes_together",
     [](auto& c) { c.dispatch_data_type = DataType::FP8; },
     {"dispatch_data_type = fp8", "set together"}},
    {"quant_forces_scatter",
     [](auto& c) { c.quant_type = QuantType::Fp8Blockwise; },
     {"combine_mode = gather", "fp8_blockwise needs scatter combine"}},
    {"quant_not_internode",
     [](auto& c) {
       c.quant_type = QuantType::Fp8DirectCast;
       c.combine_mode = CombineMode::Scatter;
       c.gpu_per_node = 4;
     },
     {"quant_type = fp8_direct_cast", "intranode only", "gpu_per_node 4"}},
    {"source_order_across_nodes_needs_v2_ll",
     [](auto& c) {
       c.receive_order = ReceiveOrder::Source;
       c.gpu_per_node = 4;
     },
     {"receive_order = source", "runs the v2_ll kernels", "internode_kernel is auto", "gpu_per_node 4 < world_size 8",
      "set internode_kernel 'v2_ll'"}},
    {"source_order_across_nodes_not_v2",
     [](auto& c) {
       c.receive_order = ReceiveOrder::Source;
       c.gpu_per_node = 4;
       c.internode_kernel = InternodeKernel::V2;
     },
     {"receive_order = source", "internode_kernel is v2"}},
    {"source_order_counts_below_2_24",
     [](auto& c) {
       c.receive_order = ReceiveOrder::Source;
       c.max_total_recv_tokens = int64_t(1) << 24;
     },
     {"receive_order = source", "below 2^24", "16777216 tokens"}},
    {"entries_need_std_moe",
     [](auto& c) { c.std_moe_combine = StdMoeCombine::WeightedEntries; },
     {"std_moe_combine = weighted_entries", "enable_std_moe is off"}},
    {"entries_need_gather",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_combine = StdMoeCombine::WeightedEntries;
       c.combine_mode = CombineMode::Scatter;
     },
     {"std_moe_combine = weighted_entries", "gather combine without quant", "combine_mode scatter"}},
    {"entries_one_node",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_combine = StdMoeCombine::WeightedEntries;
       c.gpu_per_node = 4;
     },
     {"std_moe_combine = weighted_entries", "one node's windows", "gpu_per_node 4 < world_size 8"}},
    {"fp8_std_moe_needs_std_moe",
     [](auto& c) { c.std_moe_quant = StdMoeQuant::DeepEpFp8; },
     {"std_moe_quant = deepep_fp8", "enable_std_moe is off"}},
    {"fp8_std_moe_needs_bf16_dispatch",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_quant = StdMoeQuant::DeepEpFp8Pow2;
       c.combine_mode = CombineMode::Scatter;
       c.quant_type = QuantType::Fp8DirectCast;
     },
     {"std_moe_quant = deepep_fp8_pow2", "bf16 dispatch", "quant_type fp8_direct_cast"}},
    {"fp8_std_moe_one_node",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_quant = StdMoeQuant::DeepEpFp8;
       c.gpu_per_node = 4;
     },
     {"std_moe_quant = deepep_fp8", "one node", "gpu_per_node 4 < world_size 8"}},
    {"fp8_std_moe_whole_blocks",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_quant = StdMoeQuant::DeepEpFp8;
       c.hidden_dim = 7168 + 64;
     },
     {"std_moe_quant = deepep_fp8", "hidden_dim 7232 is not a multiple of 128"}},
    {"fp8_std_moe_ue8m0_whole_words",
     [](auto& c) {
       c.enable_std_moe = true;
       c.std_moe_quant = StdMoeQuant::DeepEpFp8Ue8m0;
       c.hidden_dim = 7168 + 128;
     },
     {"std_moe_quant = deepep_fp8_ue8m0", "packed four to an int32 word", "not a multiple of 512",
      "deepep_fp8_pow2"}},
    {"token_bytes_multiple_of_16", [](auto& c) { c.hidden_dim = 7164; }, {"hidden_dim = 7164", "multiple of 16 bytes"}},
    {"asymmetric_needs_gather",
     [](auto& c) {
       c.dispatch_data_type = DataType::FP8;
       c.combine_data_type = DataType::BF16;
       c.combine_mode = CombineMode::Scatter;
     },
     {"combine_mode = scatter", "asymmetric", "gather"}},
    {"asymmetric_no_quant",
     [](auto& c) {
       c.dispatch_data_type = DataType::FP8;
       c.combine_data_type = DataType::BF16;
       c.quant_type = QuantType::Fp8Blockwise;
     },
     {"quant_type = fp8_blockwise", "asymmetric"}},
    {"asymmetric_no_std_moe",
     [](auto& c) {
       c.dispatch_data_type = DataType::FP8;
       c.combine_data_type = DataType::BF16;
       c.enable_std_moe = true;
     },
     {"enable_std_moe = true", "asymmetric"}},
    {"no_fp4_combine",
     [](auto& c) {
       c.dispatch_data_type = DataType::FP4;
       c.combine_data_type = DataType::FP4;
     },
     {"combine_data_type = fp4", "returns bf16 or f32 rows"}},
    {"no_fp8_combine",
     [](auto& c) {
       c.dispatch_data_type = DataType::FP8;
       c.combine_data_type = DataType::FP8;
     },
     {"combine_data_type = fp8", "returns bf16 or f32 rows", "quant_type compresses"}},
    {"std_moe_is_bf16", [](auto& c) {
       c.enable_std_moe = true;
       c.data_type = DataType::F32;
     },
     {"enable_std_moe = true", "bf16 only"}},
    {"gpu_per_node_divides_world", [](auto& c) { c.gpu_per_node = 3; }, {"gpu_per_node = 3", "divide world_size"}},
    {"scales_together", [](auto& c) { c.scale_dim = 56; }, {"scale_dim = 56", "both"}},
    {"schedule_last_entry_unbounded",
     [](auto& c) { c.schedule = {{128, 32, 8, 32, 8}, {1024, 64, 8, 64, 8}}; },
     {"schedule[1] = 1024", "only the last"}},
    {"schedule_increasing",
     [](auto& c) { c.schedule = {{1024, 32, 8, 32, 8}, {128, 64, 8, 64, 8}, {std::nullopt, 64, 8, 64, 8}}; },
     {"schedule[1] = 128", "increase"}},
    {"geometry_positive", [](auto& c) { c.warp_num_per_block = 0; }, {"warp_num_per_block = 0", "positive"}},
    {"known_backend", [](auto& c) { c.kernel_backend = "flydsl"; }, {"kernel_backend = flydsl", "one backend"}},
    {"known_target", [](auto& c) { c.target = "gfx90a"; }, {"target = 'gfx90a'", "gfx942, gfx950"}},
    // 32-bit device indices: each product is computed in 64 bits and bounded.
    {"experts_fit_an_index",
     [](auto& c) {
       c.num_experts_per_rank = 1 << 30;
     },
     {"num_experts_per_rank = 1073741824", "world_size * num_experts_per_rank = 8589934592", "2147483647"}},
    {"receive_slots_fit_an_index",
     [](auto& c) { c.max_total_recv_tokens = 300000000; },
     {"max_total_recv_tokens = 300000000", "rank * capacity + slot", "2147483647"}},
    {"worst_case_slots_fit_an_index",
     [](auto& c) { c.max_num_inp_token_per_rank = 100000000; },
     {"max_num_inp_token_per_rank = 100000000", "2147483647"}},
    {"routed_entries_fit_an_index",
     [](auto& c) {
       c.max_num_inp_token_per_rank = 1 << 29;
       c.max_total_recv_tokens = 1000;
     },
     {"max_num_inp_token_per_rank = 536870912", "num_experts_per_token"}},
    {"peer_timeout_in_range", [](auto& c) { c.peer_timeout_s = -2; }, {"peer_timeout_s", "[0.001, 86400]"}},
};

void PrintTo(const Rule& rule, std::ostream* os) { *os << rule.name; }

class ConfigRule : public ::testing::TestWithParam<Rule> {};

TEST_P(ConfigRule, IsEnforcedWithAMessageNamingFieldValueAndRule) {
  EpDispatchCombineConfig config = valid();
  ASSERT_NO_THROW(config.validate());
  GetParam().breakIt(config);
  try {
    config.validate();
    FAIL() << "accepted a config that breaks " << GetParam().name;
  } catch (const Error& error) {
    for (const char* mention : GetParam().mentions)
      EXPECT_NE(std::string(error.what()).find(mention), std::string::npos)
          << "'" << mention << "' missing from: " << error.what();
    EXPECT_FALSE(error.fix().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(SeedNotes, ConfigRule, ::testing::ValuesIn(kRules),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Config, DerivedProperties) {
  EpDispatchCombineConfig c = valid();
  EXPECT_EQ(c.num_experts(), 256);
  EXPECT_EQ(c.dispatch_token_bytes(), 7168u * 2);
  EXPECT_EQ(c.total_recv_tokens(), 8 * 4096);
  EXPECT_FALSE(c.internode());
  c.dispatch_data_type = DataType::FP4;
  c.combine_data_type = DataType::BF16;
  EXPECT_EQ(c.dispatch_token_bytes(), 3584u);
  EXPECT_EQ(c.combine_token_bytes(), 7168u * 2);
  EXPECT_NO_THROW(c.validate());  // fp4 dispatch, bf16 combine, gather, on gfx950
  // The op moves FP4 tokens as bytes and converts none: every target takes them.
  for (const char* target : {"gfx942", "gfx1200", "sm90", "host"}) {
    c.target = target;
    EXPECT_NO_THROW(c.validate()) << target;
  }
  c = valid();
  c.gpu_per_node = 4;
  c.max_num_inp_token_per_rank = 100;
  EXPECT_TRUE(c.internode());
  EXPECT_EQ(c.max_tokens_per_rank_padded(), 128);  // rounded up to the wave (64)
  c.max_total_recv_tokens = 1000;
  EXPECT_EQ(c.total_recv_tokens(), 1000);
}

TEST(Config, ScheduleChoosesTheVariantByTokenCount) {
  EpDispatchCombineConfig c = valid();
  c.schedule = {{16, 8, 4, 8, 4}, {512, 32, 8, 32, 8}, {std::nullopt, 128, 16, 128, 16}};
  ASSERT_NO_THROW(c.validate());
  EXPECT_EQ(c.geometry_for(1).dispatch_blocks, 8);
  EXPECT_EQ(c.geometry_for(16).dispatch_blocks, 8);
  EXPECT_EQ(c.geometry_for(17).dispatch_blocks, 32);
  EXPECT_EQ(c.geometry_for(100000).combine_warps, 16);
  // Without a schedule: the target's table, with set fields overriding it.
  c.schedule.clear();
  c.warp_num_per_block = 6;
  for (const ScheduleEntry& entry : c.resolved_schedule()) EXPECT_EQ(entry.dispatch_warps, 6);
  EXPECT_FALSE(c.resolved_schedule().back().max_tokens.has_value());
}

TEST(Config, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(parse_data_type("fp32"), DataType::F32);
  EXPECT_EQ(parse_quant_type("fp8_blockwise"), QuantType::Fp8Blockwise);
  EXPECT_EQ(parse_internode_kernel("v2_ll"), InternodeKernel::V2LowLatency);
  EXPECT_EQ(parse_receive_order("source"), ReceiveOrder::Source);
  EXPECT_THROW(parse_receive_order("sorted"), Error);
  EXPECT_EQ(parse_std_moe_combine("weighted_entries"), StdMoeCombine::WeightedEntries);
  EXPECT_STREQ(name_of(StdMoeCombine::RankSums), "rank_sums");
  EXPECT_THROW(parse_std_moe_combine("weighted"), Error);
  EXPECT_EQ(parse_std_moe_quant("deepep_fp8_ue8m0"), StdMoeQuant::DeepEpFp8Ue8m0);
  EXPECT_STREQ(name_of(StdMoeQuant::DeepEpFp8Pow2), "deepep_fp8_pow2");
  EXPECT_THROW(parse_std_moe_quant("fp8"), Error);
  try {
    parse_combine_mode("reduce");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("combine_mode = 'reduce'"), std::string::npos);
    EXPECT_NE(error.expected().find("gather, scatter"), std::string::npos);
  }
}

}  // namespace
}  // namespace epjit::ep
