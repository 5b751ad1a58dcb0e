// The op end to end on host ranks against the reference: dtypes and target
// numerics, gather and scatter, quant, std-MoE, routing replay, odd shapes,
// skewed routing, threads and processes, worlds 1 to 8, the low-latency
// combine and the staged one, one-phase and split calls.
#include <gtest/gtest.h>

#include "../common/ep_harness.h"

namespace epjit::testing {
namespace {

KernelCache& testCache() { return e2eCache(EPJIT_TEST_WORK_DIR); }

std::vector<EpCase> matrix() {
  std::vector<EpCase> cases;
  auto add = [&](EpCase c) { cases.push_back(std::move(c)); };
  using enum DataType;
  const CombineMode scatter = CombineMode::Scatter;
  // Worlds, threads and processes.
  add({.name = "bf16_gather_w1", .world = 1});
  add({.name = "bf16_gather_w2"});
  add({.name = "bf16_gather_w4", .world = 4});
  add({.name = "bf16_gather_w8", .world = 8, .experts_per_rank = 2});
  add({.name = "bf16_gather_w2_processes", .ranks = Ranks::Processes});
  add({.name = "bf16_scatter_w4_processes", .world = 4, .ranks = Ranks::Processes, .mode = scatter});
  add({.name = "bf16_scatter_w8_processes", .world = 8, .ranks = Ranks::Processes, .experts_per_rank = 2,
       .mode = scatter});
  // Row types and the targets' numerics.
  add({.name = "f32_gather_w2", .data_type = F32});
  add({.name = "f32_scatter_w4", .world = 4, .data_type = F32, .mode = scatter});
  add({.name = "bf16_scatter_w2", .mode = scatter});
  add({.name = "fp8_gfx942_gather_w2", .target = "host-gfx942", .data_type = FP8});
  add({.name = "fp8_gfx950_scatter_w4", .target = "host-gfx950", .world = 4, .data_type = FP8, .mode = scatter});
  add({.name = "fp4_gfx950_gather_w2", .target = "host-gfx950", .data_type = FP4});
  add({.name = "fp4_gfx1250_scatter_w4", .target = "host-gfx1250", .world = 4, .data_type = FP4, .mode = scatter});
  // MX FP4 tokens with their E8M0 scales (hidden / 32 bytes), as gpu_ep_test runs them.
  add({.name = "fp4_scales_gather_w3", .world = 3, .data_type = FP4, .scale_dim = 10, .scale_type_size = 1});
  add({.name = "fp4_sm100_scatter_w3", .target = "host-sm100", .world = 3, .data_type = FP4, .mode = scatter,
       .quant = QuantType::Fp8Blockwise});
  // FP4 tokens on a target without FP4 conversions (gfx942's numerics, as
  // gfx1200's): the op moves their bytes and converts nothing.
  add({.name = "fp4_gfx942_gather_w3", .target = "host-gfx942", .world = 3, .data_type = FP4});
  add({.name = "fp8_scales_gfx950_w2", .target = "host-gfx950", .data_type = FP8, .scale_dim = 7,
       .scale_type_size = 4});
  add({.name = "bf16_scales_u8_w4", .world = 4, .scale_dim = 3, .scale_type_size = 1});
  add({.name = "asym_fp8_bf16_gfx942_w4", .target = "host-gfx942", .world = 4, .dispatch_type = FP8,
       .combine_type = BF16});
  add({.name = "asym_bf16_f32_w2", .dispatch_type = BF16, .combine_type = F32});
  // Quantized scatter combine.
  add({.name = "quant_direct_gfx942_w2", .target = "host-gfx942", .mode = scatter,
       .quant = QuantType::Fp8DirectCast});
  add({.name = "quant_blockwise_gfx950_w4", .target = "host-gfx950", .world = 4, .mode = scatter,
       .quant = QuantType::Fp8Blockwise});
  add({.name = "quant_blockwise_f32_gfx1250_w2", .target = "host-gfx1250", .data_type = F32, .mode = scatter,
       .quant = QuantType::Fp8Blockwise});
  add({.name = "quant_direct_fp8_dispatch_w4_processes", .target = "host-gfx950", .world = 4,
       .ranks = Ranks::Processes, .data_type = FP8, .mode = scatter, .quant = QuantType::Fp8DirectCast});
  // Standard MoE and routing replay.
  add({.name = "std_moe_gather_w2", .std_moe = true});
  add({.name = "std_moe_scatter_w4", .world = 4, .mode = scatter, .std_moe = true});
  // Under quant, stage 1 sums its warp's pieces into staging rows, then quantizes them from there
  // (runs of many items per warp at 2100 tokens on the host's grid).
  add({.name = "std_moe_scatter_direct_gfx942_w3", .target = "host-gfx942", .world = 3, .mode = scatter,
       .quant = QuantType::Fp8DirectCast, .std_moe = true});
  add({.name = "std_moe_scatter_blockwise_large_w2", .hidden = 128, .max_tokens = 2100, .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .calls = {2100, 5, 2049, 2048}, .std_moe = true});
  add({.name = "replay_gather_w2", .replay = true});
  add({.name = "replay_scatter_quant_w4", .target = "host-gfx942", .world = 4, .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .replay = true});
  // Top-k lists that name an expert twice (counted once or per entry, packed once).
  add({.name = "repeated_experts_w3", .world = 3, .routing = RoutingKind::Repeats});
  add({.name = "repeated_experts_std_moe_w2_processes", .ranks = Ranks::Processes, .routing = RoutingKind::Repeats,
       .std_moe = true});
  // MORI's order: a replay right after the dispatch it reuses, then one combine.
  add({.name = "replay_before_combine_w3", .world = 3, .replay = true, .replay_before_combine = true});
  add({.name = "replay_before_combine_scatter_w2_processes", .ranks = Ranks::Processes, .mode = scatter,
       .routing = RoutingKind::Masked, .replay = true, .replay_before_combine = true});
  // Shapes and routings.
  add({.name = "hidden7168_top8_w4", .world = 4, .hidden = 7168, .topk = 8, .max_tokens = 9, .calls = {9, 0, 1, 5}});
  add({.name = "top1_w2", .topk = 1});
  add({.name = "top8_w2", .topk = 8, .experts_per_rank = 8});
  add({.name = "skewed_w4", .world = 4, .topk = 3, .routing = RoutingKind::Skewed});
  add({.name = "skewed_top8_w2", .topk = 8, .experts_per_rank = 8, .routing = RoutingKind::Skewed});
  add({.name = "local_w4", .world = 4, .routing = RoutingKind::Local});
  // -1 slots ("no expert") in every kind of call.
  add({.name = "masked_gather_w4", .world = 4, .routing = RoutingKind::Masked});
  add({.name = "masked_scatter_quant_w2", .target = "host-gfx950", .mode = scatter, .quant = QuantType::Fp8Blockwise,
       .routing = RoutingKind::Masked});
  add({.name = "masked_std_moe_w2", .routing = RoutingKind::Masked, .std_moe = true});
  add({.name = "masked_replay_w2_processes", .ranks = Ranks::Processes, .routing = RoutingKind::Masked,
       .replay = true});
  // Tiny calls sent a block per top-k entry, each warp a share of the row (3
  // warps: shares of 56, 56 and 48 words of a 160-word row; fp8: 20 + 20 + 20 + 20).
  const std::vector<int64_t> tiny = {1, 2, 0, 3, 1, 37, 2};
  add({.name = "tiny_by_block_w4", .world = 4, .calls = tiny, .dispatch_blocks = 9, .warps_per_block = 3});
  add({.name = "tiny_by_block_replay_masked_w2", .routing = RoutingKind::Masked, .calls = tiny, .replay = true,
       .dispatch_blocks = 9, .warps_per_block = 3});
  add({.name = "tiny_by_block_fp8_scales_gfx942_w2", .target = "host-gfx942", .data_type = FP8, .scale_dim = 5,
       .scale_type_size = 4, .calls = tiny, .dispatch_blocks = 7, .warps_per_block = 4});
  add({.name = "tiny_by_block_skewed_top8_w2_processes", .ranks = Ranks::Processes, .hidden = 7168, .topk = 8,
       .experts_per_rank = 8, .max_tokens = 9, .routing = RoutingKind::Skewed, .calls = {1, 2, 9, 1},
       .dispatch_blocks = 16, .warps_per_block = 2});
  // Scatter's stage 1 and the sums over (row, piece) items, gather's staging
  // of a caller's buffer block by block: a hidden of 1000
  // (8 blocks of 128, the last one partial) on 15 warps takes up to 4 pieces
  // of 256 per row at these token counts, the last piece 232 elements.
  add({.name = "tiny_gather_staged_w3", .world = 3, .hidden = 1000, .calls = tiny, .warps_per_block = 3,
       .combine_blocks = 5});
  add({.name = "tiny_scatter_pieces_w2", .hidden = 1000, .mode = scatter, .calls = tiny, .warps_per_block = 3,
       .combine_blocks = 5});
  add({.name = "tiny_scatter_pieces_direct_gfx942_w3", .target = "host-gfx942", .world = 3, .hidden = 1000,
       .mode = scatter, .quant = QuantType::Fp8DirectCast, .calls = tiny, .warps_per_block = 3,
       .combine_blocks = 5});
  add({.name = "tiny_scatter_pieces_blockwise_gfx950_w2_processes", .target = "host-gfx950", .ranks = Ranks::Processes,
       .hidden = 1000, .mode = scatter, .quant = QuantType::Fp8Blockwise, .routing = RoutingKind::Masked,
       .calls = tiny, .warps_per_block = 3, .combine_blocks = 5});
  // std-MoE's pack of a small call takes a block per received top-k entry
  // while they fit the blocks (9 here: the one-token calls), a warp per entry
  // while they fit the warps (27), and a warp per token beyond (37 tokens).
  add({.name = "tiny_std_moe_by_entry_w2", .calls = tiny, .std_moe = true, .dispatch_blocks = 9,
       .warps_per_block = 3});
  // By block up to three tokens, a row of 125 chunks over 3 warps (42, 42, 41).
  add({.name = "tiny_std_moe_by_block_w2", .hidden = 1000, .calls = tiny, .std_moe = true, .dispatch_blocks = 24,
       .warps_per_block = 3});
  add({.name = "tiny_std_moe_by_entry_repeats_scatter_w3", .world = 3, .mode = scatter, .routing = RoutingKind::Repeats,
       .calls = tiny, .std_moe = true, .dispatch_blocks = 9, .warps_per_block = 3});
  add({.name = "tiny_std_moe_scatter_blockwise_gfx950_w2", .target = "host-gfx950", .hidden = 1000, .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .routing = RoutingKind::Repeats, .calls = tiny, .std_moe = true,
       .warps_per_block = 3, .combine_blocks = 5});
  add({.name = "no_tokens_w2", .calls = {0, 0}});
  add({.name = "no_combine_weights_w2", .weights = false});
  add({.name = "zero_copy_gather_w4", .world = 4, .zero_copy = true});
  add({.name = "zero_copy_f32_w2_processes", .ranks = Ranks::Processes, .data_type = F32, .zero_copy = true});
  // 200 alternating dispatch/combine calls with changing token counts and no
  // reset: the counters and flags must reset themselves every time.
  std::mt19937 rng(2026);
  std::vector<int64_t> counts(200);
  for (int64_t& n : counts) n = std::uniform_int_distribution<int64_t>(0, 37)(rng);
  add({.name = "alternating_200_gather_w4", .world = 4, .hidden = 128, .calls = counts});
  add({.name = "alternating_200_scatter_quant_w2", .target = "host-gfx950", .hidden = 128, .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .calls = counts});
  // The token count on the device (one graph for every batch): max_tokens
  // rows passed, the count's first sent, padding never sent nor summed.
  add({.name = "device_count_gather_w3", .world = 3, .calls = {37, 0, 1, 20}, .device_count = true});
  add({.name = "device_count_scatter_quant_gfx942_w2", .target = "host-gfx942", .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .calls = {5, 37, 0}, .device_count = true});
  add({.name = "device_count_std_moe_w2_processes", .ranks = Ranks::Processes, .calls = {13, 0, 37},
       .std_moe = true, .device_count = true});
  add({.name = "device_count_tiny_by_block_fp8_scales_w4", .target = "host-gfx950", .world = 4, .data_type = FP8,
       .scale_dim = 5, .scale_type_size = 4, .calls = tiny, .device_count = true, .dispatch_blocks = 9,
       .warps_per_block = 3});
  add({.name = "device_count_hidden7168_top8_w2", .hidden = 7168, .topk = 8, .experts_per_rank = 8, .max_tokens = 9,
       .calls = {9, 1, 4}, .device_count = true});
  // Internode: nodes of gpu_per_node ranks; ranks on other nodes are reached
  // through the host transport (a stand-in for the network). Each case runs
  // v2_ll ("internode_...") and v2 ("internode_v2_..."): v2 forwards through
  // rail peers and sums in two levels (reference::summation_groups).
  auto internode = [&](EpCase c) {
    const std::string name = c.name;
    c.internode_kernel = InternodeKernel::V2LowLatency;
    c.name = "internode_" + name;
    add(c);
    c.internode_kernel = InternodeKernel::V2;
    c.name = "internode_v2_" + name;
    add(c);
  };
  internode({.name = "w4_g2_gather", .world = 4, .gpu_per_node = 2});
  internode({.name = "w4_g2_scatter_processes", .world = 4, .ranks = Ranks::Processes, .mode = scatter,
             .gpu_per_node = 2});
  internode({.name = "w6_g3_skewed_scatter", .world = 6, .topk = 4, .mode = scatter, .routing = RoutingKind::Skewed,
             .gpu_per_node = 3});
  internode({.name = "w8_g2_top8_gather", .world = 8, .topk = 8, .experts_per_rank = 3, .gpu_per_node = 2});
  internode({.name = "w3_g1_masked_replay", .world = 3, .routing = RoutingKind::Masked, .replay = true,
             .gpu_per_node = 1});
  internode({.name = "w4_g2_replay_through_map_scatter", .world = 4, .mode = scatter, .replay = true,
             .replay_through_map = true, .gpu_per_node = 2});
  add({.name = "replay_through_map_w3", .world = 3, .replay = true, .replay_through_map = true});
  internode({.name = "w3_g1_replay_before_combine_scatter", .world = 3, .mode = scatter, .replay = true,
             .replay_before_combine = true, .gpu_per_node = 1});
  internode({.name = "w4_g2_std_moe_scatter", .world = 4, .mode = scatter, .std_moe = true, .gpu_per_node = 2});
  internode({.name = "w4_g2_std_moe_gather_repeats", .world = 4, .routing = RoutingKind::Repeats, .std_moe = true,
             .gpu_per_node = 2});
  internode({.name = "w6_g3_f32_zero_copy", .world = 6, .data_type = F32, .zero_copy = true, .gpu_per_node = 3});
  internode({.name = "fp8_scales_gfx942_w4_g2", .target = "host-gfx942", .world = 4, .data_type = FP8,
             .scale_dim = 5, .scale_type_size = 4, .gpu_per_node = 2});
  internode({.name = "fp4_gfx950_scatter_w4_g2", .target = "host-gfx950", .world = 4, .data_type = FP4,
             .mode = scatter, .gpu_per_node = 2});
  internode({.name = "fp4_gfx1250_w3_g1", .target = "host-gfx1250", .world = 3, .data_type = FP4,
             .gpu_per_node = 1});
  internode({.name = "local_no_tokens_w4_g2", .world = 4, .routing = RoutingKind::Local, .calls = {0, 5, 0},
             .gpu_per_node = 2});
  internode({.name = "skewed_top8_w4_g2", .world = 4, .hidden = 200, .topk = 8, .experts_per_rank = 8,
             .max_tokens = 19, .routing = RoutingKind::Skewed, .calls = {19, 1, 0, 19}, .gpu_per_node = 2});
  internode({.name = "alternating_200_w4_g2", .world = 4, .hidden = 64, .mode = scatter, .calls = counts,
             .gpu_per_node = 2});
  // auto on both sides of its crossover (internode_auto_ll_max_tokens, 512
  // by default): v2_ll at 37/36 and 1/0 tokens, v2 at 600 and 520/519; the
  // ranks of a call are on the same side.
  add({.name = "internode_auto_both_sides_w4_g2", .world = 4, .hidden = 64, .max_tokens = 600,
       .calls = {37, 600, 520, 1}, .gpu_per_node = 2});
  add({.name = "internode_auto_both_sides_replay_scatter_w6_g3", .world = 6, .hidden = 64, .max_tokens = 600,
       .mode = scatter, .calls = {600, 2, 520}, .replay = true, .gpu_per_node = 3});
  // DP attention: ranks of a call on two sides of auto's crossover (41 tokens
  // on even ranks, 40 on odd ones, crossover 40) agree when each passes the
  // call's largest count; without it their transfers would never pair. The
  // 40-token rank runs v2, whose two-level sums the reference checks.
  add({.name = "internode_auto_straddling_ranks_agree_w4_g2", .world = 4, .hidden = 64, .max_tokens = 60,
       .calls = {41, 7, 41, 60, 1}, .gpu_per_node = 2, .internode_auto_ll_max_tokens = 40,
       .pass_max_tokens_across_ranks = true});
  add({.name = "internode_auto_straddling_ranks_agree_replay_scatter_w6_g3", .world = 6, .hidden = 64,
       .topk = 4, .max_tokens = 60, .mode = scatter, .calls = {41, 2, 41}, .replay = true,
       .replay_through_map = true, .gpu_per_node = 3, .internode_auto_ll_max_tokens = 40,
       .pass_max_tokens_across_ranks = true});
  // Under auto a v2_ll call moves internode_auto_ll_max_tokens rows per peer,
  // not the op's maximum: top-8 over all 8 experts sends every token to every
  // rank, so a 40-token call fills its blocks to that cut exactly.
  add({.name = "internode_auto_ll_rows_at_the_cut_w4_g2", .world = 4, .hidden = 64, .topk = 8,
       .experts_per_rank = 2, .max_tokens = 600, .calls = {40, 600, 1, 42}, .gpu_per_node = 2,
       .internode_auto_ll_max_tokens = 40});
  add({.name = "internode_auto_ll_rows_at_the_cut_scatter_replay_w4_g2", .world = 4, .hidden = 64, .topk = 8,
       .experts_per_rank = 2, .max_tokens = 600, .mode = scatter, .calls = {40, 600, 40}, .replay = true,
       .gpu_per_node = 2, .internode_auto_ll_max_tokens = 40});
  // The low-latency combine far past auto's crossover (TargetInfo::crossovers):
  // calls of more rows than warps, several rows per warp, and a hidden of
  // 1000 whose last piece is partial.
  add({.name = "low_latency_past_auto_w3", .world = 3, .hidden = 1000, .max_tokens = 300, .calls = {300, 1, 0, 257},
       .low_latency_combine = true});
  add({.name = "low_latency_past_auto_scatter_f32_top8_w2", .hidden = 136, .topk = 8, .experts_per_rank = 8,
       .max_tokens = 200, .data_type = F32, .mode = scatter, .routing = RoutingKind::Skewed, .calls = {200, 3, 199},
       .low_latency_combine = true});
  // Source order (DeepEP's): every row where the reference lists it, rank
  // 0's first, each rank's in token order, at every size, routing and count.
  add({.name = "source_order_w1", .world = 1, .source_order = true});
  add({.name = "source_order_w4", .world = 4, .source_order = true});
  add({.name = "source_order_skewed_top8_w3_processes", .world = 3, .ranks = Ranks::Processes, .topk = 8,
       .experts_per_rank = 8, .routing = RoutingKind::Skewed, .source_order = true});
  add({.name = "source_order_masked_repeats_w4", .world = 4, .routing = RoutingKind::Masked, .source_order = true});
  add({.name = "source_order_repeats_scatter_quant_w2", .target = "host-gfx950", .mode = scatter,
       .quant = QuantType::Fp8Blockwise, .routing = RoutingKind::Repeats, .source_order = true});
  add({.name = "source_order_tiny_by_block_w4", .world = 4, .calls = tiny, .dispatch_blocks = 9,
       .warps_per_block = 3, .source_order = true});
  add({.name = "source_order_device_count_w3", .world = 3, .calls = {37, 0, 1, 20}, .device_count = true,
       .source_order = true});
  add({.name = "source_order_replay_std_moe_w2", .std_moe = true, .replay = true, .source_order = true});
  add({.name = "source_order_alternating_200_w4", .world = 4, .hidden = 128, .calls = counts, .source_order = true});
  // Across nodes (v2_ll): rows from other nodes where their ranks come, not
  // after the node's; replays, both combines, rank processes, uneven nodes.
  auto across_nodes = [&](EpCase c) {
    c.name = "source_order_internode_" + c.name;
    c.source_order = true;
    c.internode_kernel = InternodeKernel::V2LowLatency;
    add(c);
  };
  across_nodes({.name = "w4_g2", .world = 4, .gpu_per_node = 2});
  across_nodes({.name = "w6_g2_skewed_top8_scatter", .world = 6, .topk = 8, .experts_per_rank = 3, .mode = scatter,
                .routing = RoutingKind::Skewed, .gpu_per_node = 2});
  across_nodes({.name = "w3_g1_masked_repeats_replay", .world = 3, .routing = RoutingKind::Masked, .replay = true,
                .gpu_per_node = 1});
  across_nodes({.name = "w4_g2_processes_replay_through_map_scatter", .world = 4, .ranks = Ranks::Processes,
                .mode = scatter, .replay = true, .replay_through_map = true, .gpu_per_node = 2});
  across_nodes({.name = "w6_g3_f32_zero_copy_calls", .world = 6, .data_type = F32, .calls = {37, 0, 1, 20},
                .zero_copy = true, .gpu_per_node = 3});
  across_nodes({.name = "w4_g2_alternating_200", .world = 4, .hidden = 64, .calls = counts, .gpu_per_node = 2});
  across_nodes({.name = "w4_g2_tiny_by_block", .world = 4, .calls = tiny, .gpu_per_node = 2, .dispatch_blocks = 9,
                .warps_per_block = 3});
  // Standard MoE with weighted entries (DeepEP's low-latency combine): each
  // origin token is its own expert rows times its own weights, fma in top-k
  // order, whatever the world; repeats read the row their first entry took.
  add({.name = "entries_w1", .world = 1, .std_moe = true, .entry_combine = true});
  add({.name = "entries_w3", .world = 3, .std_moe = true, .entry_combine = true});
  add({.name = "entries_repeats_w4", .world = 4, .routing = RoutingKind::Repeats, .std_moe = true,
       .entry_combine = true});
  add({.name = "entries_masked_zero_copy_w2", .routing = RoutingKind::Masked, .std_moe = true, .entry_combine = true,
       .zero_copy = true});
  add({.name = "entries_tiny_hidden7168_top8_gfx942_w2", .target = "host-gfx942", .hidden = 7168, .topk = 8,
       .experts_per_rank = 8, .max_tokens = 8, .calls = {1, 7, 0, 8}, .std_moe = true, .entry_combine = true});
  add({.name = "entries_source_order_w3_processes", .world = 3, .ranks = Ranks::Processes, .std_moe = true,
       .entry_combine = true, .source_order = true});
  // Standard MoE in fp8 (std_moe_quant, DeepEP's low-latency fp8 dispatch):
  // every live packed row's codes and scales are numerics.h's DeepEP cast of
  // it, in DeepEP's column-major layouts; a hidden of 640 ends in a partial
  // piece of 512; tiny calls pack by block; gfx942 converts OCP E4M3 in
  // software.
  const StdMoeQuant deepep = StdMoeQuant::DeepEpFp8, pow2 = StdMoeQuant::DeepEpFp8Pow2,
                    ue8m0 = StdMoeQuant::DeepEpFp8Ue8m0;
  add({.name = "fp8_entries_w1", .world = 1, .hidden = 384, .std_moe = true, .entry_combine = true,
       .std_moe_quant = deepep});
  add({.name = "fp8_pow2_entries_w3", .world = 3, .hidden = 640, .std_moe = true, .entry_combine = true,
       .std_moe_quant = pow2});
  add({.name = "fp8_ue8m0_repeats_entries_w4", .world = 4, .hidden = 1024, .routing = RoutingKind::Repeats,
       .std_moe = true, .entry_combine = true, .std_moe_quant = ue8m0});
  add({.name = "fp8_ue8m0_tiny_hidden7168_top8_gfx942_w2", .target = "host-gfx942", .hidden = 7168, .topk = 8,
       .experts_per_rank = 8, .max_tokens = 8, .calls = {1, 7, 0, 8}, .std_moe = true, .entry_combine = true,
       .std_moe_quant = ue8m0});
  add({.name = "fp8_rank_sums_masked_w2", .hidden = 256, .routing = RoutingKind::Masked, .std_moe = true,
       .std_moe_quant = deepep});
  add({.name = "fp8_source_order_w3_processes", .world = 3, .ranks = Ranks::Processes, .hidden = 512,
       .std_moe = true, .entry_combine = true, .std_moe_quant = pow2, .source_order = true});
  // More chunks of 8 tokens than warps: a warp orders several chunks.
  add({.name = "source_order_2100_tokens_w2", .hidden = 64, .max_tokens = 2100, .calls = {2100, 5, 2049},
       .dispatch_blocks = 3, .warps_per_block = 4, .source_order = true});
  // Every case above that could run either combine protocol (intranode, no
  // quant, no std-MoE) also runs the one auto does not pick for it:
  // "staged_..." where auto picks low latency, "low_latency_..." where it
  // picks the staged combine of the mode.
  for (size_t i = 0, n = cases.size(); i < n; ++i)
    for (EpCase& other : otherProtocol(cases[i])) cases.push_back(std::move(other));
  // Every case again as split calls (dispatch_send/recv, combine_send/recv,
  // with other work on the stream between the halves): the same bits.
  for (size_t i = 0, n = cases.size(); i < n; ++i) {
    EpCase split = cases[i];
    split.split_phase = true;
    split.name = "split_" + split.name;
    cases.push_back(std::move(split));
  }
#ifdef EPJIT_E2E_SANITIZER
  // Under a sanitizer everything runs many times slower: a subset that covers
  // every kernel and protocol, processes only where TSan allows forking.
  std::vector<std::string> subset = {"bf16_gather_w4",          "bf16_scatter_w2",          "quant_blockwise_gfx950_w4",
                                     "std_moe_scatter_w4",      "replay_scatter_quant_w4", "skewed_w4",
                                     "fp4_gfx1250_scatter_w4", "alternating_200_gather_w4", "masked_gather_w4",
                                     "internode_w6_g3_skewed_scatter", "internode_w3_g1_masked_replay",
                                     "internode_w4_g2_gather", "internode_v2_w6_g3_skewed_scatter",
                                     "internode_v2_w3_g1_masked_replay", "internode_v2_w4_g2_gather",
                                     "low_latency_bf16_gather_w4", "low_latency_bf16_scatter_w2",
                                     "low_latency_masked_gather_w4", "staged_hidden7168_top8_w4",
                                     "low_latency_past_auto_w3", "split_bf16_gather_w4",
                                     "split_quant_blockwise_gfx950_w4", "split_internode_v2_w4_g2_gather",
                                     "split_low_latency_bf16_scatter_w2", "split_std_moe_scatter_w4",
                                     "source_order_w4", "source_order_tiny_by_block_w4",
                                     "split_source_order_device_count_w3", "entries_w3",
                                     "split_entries_repeats_w4", "fp8_ue8m0_repeats_entries_w4"};
  if (std::string(EPJIT_E2E_SANITIZER) != "thread")
    subset.insert(subset.end(), {"bf16_scatter_w4_processes", "quant_direct_fp8_dispatch_w4_processes"});
  std::erase_if(cases, [&](const EpCase& c) { return std::find(subset.begin(), subset.end(), c.name) == subset.end(); });
#endif
  return cases;
}

class EpEndToEnd : public ::testing::TestWithParam<EpCase> {};

TEST_P(EpEndToEnd, MatchesTheReference) {
  const EpCase& c = GetParam();
  const std::string failures =
      runRanks(c.world, c.ranks, testCache(),
               [&](int rank, Communicator& comm, KernelCache& cache) { return runRank(c, rank, comm, cache); },
               c.gpu_per_node);
  EXPECT_EQ(failures, "");
}

// The straddling call above without the largest count: the even ranks run
// v2, the odd ones v2_ll, so their transfers cannot pair. The host transport
// sees it at once, and every rank is told how to make them agree.
TEST(EpInternodeAuto, RanksOnTwoSidesOfTheCrossoverAreToldHowToAgree) {
  const EpCase c{.name = "straddling_without_the_largest_count", .world = 4, .hidden = 64, .max_tokens = 60,
                 .calls = {41}, .gpu_per_node = 2, .internode_auto_ll_max_tokens = 40};
  const std::string failures =
      runRanks(c.world, c.ranks, testCache(),
               [&](int rank, Communicator& comm, KernelCache& cache) { return runRank(c, rank, comm, cache); },
               c.gpu_per_node);
  for (int rank = 0; rank < c.world; ++rank)
    EXPECT_NE(failures.find("rank " + std::to_string(rank) + " threw"), std::string::npos) << failures;
  EXPECT_NE(failures.find("internode exchange"), std::string::npos) << failures;
  EXPECT_NE(failures.find("pass the call's largest token count as max_tokens_across_ranks"), std::string::npos)
      << failures;
}

INSTANTIATE_TEST_SUITE_P(Matrix, EpEndToEnd, ::testing::ValuesIn(matrix()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace epjit::testing
