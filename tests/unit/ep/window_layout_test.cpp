// The op's window comes from the module's interface record: the regions the
// EP template declares, in its order, sized for the specialization; regions
// never overlap or lose their 16-byte row alignment.
#include <gtest/gtest.h>

#include "epjit/cache.h"
#include "epjit/ep/op.h"
#include "epjit/error.h"
#include "epjit/window_layout.h"

namespace epjit::ep {
namespace {

EpDispatchCombineConfig scatterBlockwiseConfig() {
  EpDispatchCombineConfig config;
  config.rank = 0;
  config.world_size = 8;
  config.hidden_dim = 7168;
  config.max_num_inp_token_per_rank = 37;
  config.num_experts_per_rank = 32;
  config.num_experts_per_token = 8;
  config.combine_mode = CombineMode::Scatter;
  config.quant_type = QuantType::Fp8Blockwise;
  config.target = "host";
  return config;
}

uint64_t countOf(const ModuleInterface& record, const char* name) { return record.region(name).count; }

// The module's record as an op of `config` holds it: bound to the op's limits.
ModuleInterface boundRecord(KernelCache& cache, const EpDispatchCombineConfig& config) {
  return cache.get(kernel_spec(config))->interface->bind(runtime_limits(config));
}

TEST(WindowLayout, TheTemplatesRecordSizesEveryRegionForTheConfig) {
  KernelCache cache(CacheOptions{});  // memory only
  const ModuleInterface record = boundRecord(cache, scatterBlockwiseConfig());
  const std::vector<std::string> order = {
      "state",       "signals",      "recv_tokens",  "recv_weights",   "recv_scales",     "recv_indices",
      "recv_origin", "combine_rows", "combine_weights", "scatter_rows", "scatter_codes", "scatter_scales",
      "scatter_weights", "moe_counts", "layout_counts", "expert_count_buffers", "moe_slots", "flagged_rows",
      "flagged_weights",
      "order_chunk_counts", "order_matrix", "order_offsets", "moe_entry_rows"};
  ASSERT_EQ(record.window_regions.size(), order.size());
  for (size_t r = 0; r < order.size(); ++r) EXPECT_EQ(record.window_regions[r].name, order[r]) << "region " << r;
  const uint64_t capacity = 8 * 37;
  EXPECT_EQ(record.region("recv_tokens").bytes(), capacity * 7168 * 2);  // bf16 rows as i32 words
  EXPECT_EQ(record.region("recv_tokens").element, "i32");
  EXPECT_EQ(countOf(record, "scatter_codes"), 37u * 8 * 7168);            // fp8 codes under quant
  EXPECT_EQ(countOf(record, "scatter_scales"), 37u * 8 * 56);             // 56 blocks of 128
  EXPECT_EQ(countOf(record, "scatter_rows"), 0u);                         // plain rows only without quant
  EXPECT_EQ(countOf(record, "combine_rows"), 0u);                         // gather only
  EXPECT_EQ(countOf(record, "moe_counts"), 0u);                           // std-MoE off
  // Two buffers and zeros: per rank, per expert, per node (8 + 8 x 32 + 1, padded to
  // whole 16-byte lines), per local expert.
  EXPECT_EQ(countOf(record, "layout_counts"), 3u * 268);
  EXPECT_EQ(countOf(record, "expert_count_buffers"), 3u * 32);
  EXPECT_EQ(countOf(record, "flagged_rows"), 0u);                              // the staged combine under quant
  EXPECT_EQ(countOf(record, "flagged_weights"), 0u);
  EXPECT_EQ(countOf(record, "order_chunk_counts"), 0u);                   // arrival order
  EXPECT_EQ(countOf(record, "order_matrix"), 0u);
  EXPECT_EQ(countOf(record, "moe_entry_rows"), 0u);                       // std-MoE rank sums
  EXPECT_EQ(record.constant("state_words"), int64_t(countOf(record, "state")));
  EXPECT_EQ(record.target.wave_size, 32);
}

// The low-latency combine's flagged inboxes: a flagged row (twice the row's
// elements) per (token, destination ordinal), and per box the top-k weights
// padded to 4, twice (top-6: 8 f32, 16 elements of lines).
EpDispatchCombineConfig scatterBlockwiseConfigLowLatency19() {
  EpDispatchCombineConfig config = scatterBlockwiseConfig();
  config.quant_type = QuantType::None;
  config.num_experts_per_token = 6;
  config.max_num_inp_token_per_rank = 19;
  config.low_latency_combine = true;
  return config;
}
TEST(WindowLayout, TheLowLatencyCombineHasItsFlaggedInboxes) {
  KernelCache cache(CacheOptions{});
  EpDispatchCombineConfig config = scatterBlockwiseConfigLowLatency19();
  const ModuleInterface record = boundRecord(cache, config);
  EXPECT_EQ(countOf(record, "flagged_rows"), 19u * 6 * 7168 * 2);
  EXPECT_EQ(record.region("flagged_rows").element, "bf16");
  EXPECT_EQ(countOf(record, "flagged_weights"), 19u * 6 * 8 * 2);
  config.low_latency_combine = false;
  EXPECT_EQ(countOf(boundRecord(cache, config), "flagged_rows"), 0u);
  // Another limit: the same module, its window sized for that limit.
  config.low_latency_combine = true;
  config.max_num_inp_token_per_rank = 5;
  EXPECT_EQ(cache.key(kernel_spec(config)), cache.key(kernel_spec(scatterBlockwiseConfigLowLatency19())));
  EXPECT_EQ(countOf(boundRecord(cache, config), "flagged_rows"), 5u * 6 * 7168 * 2);
}

// Source order's regions: chunk counts and next slots bounded by world x the
// op's limit, every rank's totals world x world; a module of its own (the
// flag is a template parameter), serving every limit.
TEST(WindowLayout, SourceOrderHasItsCountRegions) {
  KernelCache cache(CacheOptions{});
  EpDispatchCombineConfig config = scatterBlockwiseConfig();
  config.receive_order = ReceiveOrder::Source;
  const ModuleInterface record = boundRecord(cache, config);
  EXPECT_EQ(countOf(record, "order_chunk_counts"), 8u * 37);
  EXPECT_EQ(countOf(record, "order_offsets"), 8u * 37);
  EXPECT_EQ(countOf(record, "order_matrix"), 8u * 8);
  EXPECT_TRUE(record.has_kernel("ep_order_count") && record.has_kernel("ep_order_slots"));
  EXPECT_NE(cache.key(kernel_spec(config)), cache.key(kernel_spec(scatterBlockwiseConfig())));
  config.max_num_inp_token_per_rank = 5;
  EXPECT_EQ(countOf(boundRecord(cache, config), "order_chunk_counts"), 8u * 5);
  // Across nodes: each chunk's shift to outbox places doubles the next slots,
  // ep_order_totals joins, and the layout counts per node too.
  config.max_num_inp_token_per_rank = 37;
  config.quant_type = QuantType::None;
  config.gpu_per_node = 4;
  config.internode_kernel = InternodeKernel::V2LowLatency;
  const ModuleInterface across = boundRecord(cache, config);
  EXPECT_EQ(countOf(across, "order_offsets"), 2u * 8 * 37);
  EXPECT_EQ(countOf(across, "layout_counts"), 3u * 268);  // 8 + 8 x 32 + 2, padded
  EXPECT_TRUE(across.has_kernel("ep_order_totals"));
  EXPECT_FALSE(record.has_kernel("ep_order_totals"));
}

// Weighted entries' expert rows: experts_per_rank x world x the op's limit
// rows of hidden bf16 (the packed layout), sized by the limit; a module of
// its own, whose combine is ep_combine_entries.
TEST(WindowLayout, WeightedEntriesHaveTheirExpertRows) {
  KernelCache cache(CacheOptions{});
  EpDispatchCombineConfig config = scatterBlockwiseConfig();
  config.combine_mode = CombineMode::Gather;
  config.quant_type = QuantType::None;
  config.enable_std_moe = true;
  config.std_moe_combine = StdMoeCombine::WeightedEntries;
  const ModuleInterface record = boundRecord(cache, config);
  EXPECT_EQ(countOf(record, "moe_entry_rows"), 32u * 8 * 37 * 7168);
  EXPECT_EQ(record.region("moe_entry_rows").element, "bf16");
  EXPECT_TRUE(record.has_kernel("ep_combine_entries"));
  EXPECT_FALSE(record.has_kernel("ep_combine_gather"));
  config.max_num_inp_token_per_rank = 5;
  EXPECT_EQ(countOf(boundRecord(cache, config), "moe_entry_rows"), 32u * 8 * 5 * 7168);
}

TEST(WindowLayout, RegionsAreDisjointAlignedAndInTheRecordsOrder) {
  KernelCache cache(CacheOptions{});
  EpDispatchCombineConfig config = scatterBlockwiseConfig();
  config.enable_std_moe = false;
  const ModuleInterface record = boundRecord(cache, config);
  const WindowLayout layout = WindowLayout::of(record);
  ASSERT_EQ(layout.offsets.size(), record.window_regions.size());
  for (size_t r = 0; r < layout.offsets.size(); ++r) {
    EXPECT_EQ(layout.offsets[r] % WindowLayout::kRegionAlignment, 0u) << record.window_regions[r].name;
    EXPECT_EQ(layout.bytes[r], record.window_regions[r].bytes());
    if (r + 1 < layout.offsets.size()) EXPECT_LE(layout.offsets[r] + layout.bytes[r], layout.offsets[r + 1]);
  }
  EXPECT_GE(layout.total, layout.offsets.back() + layout.bytes.back());
  int peers[3];
  const Window table = layout.table({&peers[0], &peers[1], &peers[2]});
  EXPECT_EQ(table.peer_base[2], reinterpret_cast<char*>(&peers[2]));
  // The op's limits, for the kernels: max_tokens, capacity, in the record's order.
  ASSERT_EQ(record.runtime_params, (std::vector<std::string>{"max_tokens", "capacity", "forward_route_rows"}));
  EXPECT_EQ(table.runtime_param[0], 37u);
  EXPECT_EQ(table.runtime_param[1], uint64_t(config.total_recv_tokens()));
  EXPECT_EQ(table.region_offset[4], layout.offsets[4]);
}

TEST(WindowLayout, TooManyRegionsOrPeersAreRefused) {
  ModuleInterface record;
  record.template_name = "wide";
  for (int r = 0; r <= kMaxWindowRegions; ++r) record.window_regions.push_back({"r" + std::to_string(r), "i32", 4, 1});
  EXPECT_THROW(WindowLayout::of(record), Error);
  record.window_regions.resize(2);
  const WindowLayout layout = WindowLayout::of(record);
  EXPECT_THROW(layout.table(std::vector<void*>(kMaxWindowPeers + 1, nullptr)), Error);
}

}  // namespace
}  // namespace epjit::ep
