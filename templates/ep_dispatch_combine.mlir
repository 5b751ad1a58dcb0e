// ep_dispatch_combine: the kernels of one EpDispatchCombineOp (docs/EP.md),
// linked from the parts under ep/ into one module and one binary:
//   ep/common           parameters, named constants, the window's regions
//   ep/sync             how ranks meet (arrive, wait), routing helpers
//   ep/dispatch         ep_dispatch
//   ep/order            ep_order_count, ep_order_slots (receive_order source: the
//                       route's slots in source order, then ep_dispatch replays it)
//   ep/std_moe          ep_std_moe_pack, ep_std_moe_unpack (before the combines:
//                       gather combine unpacks std-MoE rows with its functions)
//   ep/std_moe_quantize ep_std_moe_quantize (std_moe_quant: the packed rows in fp8
//                       with DeepEP's per-128 scales, in its low-latency layouts)
//   ep/combine          the sum gather and scatter share
//   ep/combine_gather   ep_combine_gather
//   ep/combine_entries  ep_combine_entries (std-MoE with entry_combine: each (token, k)
//                       row back to its origin, summed there with its top-k weights)
//   ep/combine_scatter  ep_combine_scatter
//   ep/combine_low_latency ep_combine_low_latency (flagged inboxes, no staging:
//                       the combine of an op built with low_latency)
//   ep/counts           ep_count_experts (received tokens per local expert, on the device)
//   ep/narrow           ep_narrow_indices (a framework's int64 top-k ids into the op's int32
//                       copy, before a dispatch or a weighted-entries combine reads them)
//   ep/layout           ep_dispatch_layout (what a dispatch of a batch's top-k would send:
//                       tokens per rank and per expert, each token's ranks)
//   ep/received         ep_deliver_received (the received rows in the caller's tensors, top-k
//                       as local expert ids: a framework's normal-mode dispatch outputs)
//   ep/internode        ep_internode_ingest, ep_internode_return_pack, ep_internode_return_unpack
//                       (v2_ll; included by ep/dispatch, whose last block seals the outboxes)
//   ep/internode_v2     ep_internode_forward, ep_internode_partials, ep_internode_sum (v2)
//
// A module holds the kernels its configuration launches: the combine of its
// combine_mode (or the low-latency one), the std-MoE kernels with std_moe, the internode kernels when
// gpu_per_node < world (each kernel's when(...)).
//
// Every rank runs the same kernels on its own stream; ranks meet only through
// the symmetric window, with system-scope atomics and bounded waits. What the
// runtime binds (kernels and their parameters, the window, the constants) is
// the module's interface record: `epjit-compile --emit interface` prints it.
ep.include "ep/dispatch"
ep.include "ep/order"
ep.include "ep/std_moe"
ep.include "ep/std_moe_quantize"
ep.include "ep/combine_gather"
ep.include "ep/combine_entries"
ep.include "ep/combine_scatter"
ep.include "ep/combine_low_latency"
ep.include "ep/counts"
ep.include "ep/received"
ep.include "ep/layout"
ep.include "ep/narrow"
ep.include "ep/internode_v2"
