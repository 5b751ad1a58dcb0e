// check(), reset() and close(): what the kernels reported, starting over, ending.
#include "op_impl.h"

namespace epjit::ep {

void EpDispatchCombineOp::check() {
  const OneCallAtATime one_call = impl_->one_call("check");
  Impl& op = *impl_;
  op.require_open("check");
  op.require_not_capturing("check");
  op.stream->synchronize();
  // The error word stays set until reset(): every call queued behind the
  // failed one gave up at once, and their results are not valid either.
  const std::string where = "rank " + std::to_string(op.config.rank) + ": ";
  // First: after a failed transfer the kernels behind it read inboxes that
  // never arrived, and what they report follows from that.
  if (auto why = op.transport_failure()) {
    // Under auto, ranks on two sides of the crossover make transfers that never pair.
    const std::string auto_rule =
        op.config.internode_kernel == InternodeKernel::Auto
            ? "; with internode_kernel auto, every rank of a call must have at most, or every rank more than, " +
                  std::to_string(op.config.internode_auto_ll_max_tokens) +
                  " tokens (internode_auto_ll_max_tokens), unless every rank passes the call's largest count as "
                  "max_tokens_across_ranks"
            : "";
    throw Error(where + "an internode transfer failed: " + *why + " (the peer died, stalled, or skipped a call)",
                "every rank calls dispatch and combine the same number of times, and each comes within the timeout" +
                    auto_rule,
                "reset() on every rank before going on (it makes a new NCCL communicator), or, if a rank died, build "
                "a new communicator and op from the survivors; raise EpDispatchCombineConfig.peer_timeout_s / "
                "EPJIT_PEER_TIMEOUT_S if off-node ranks are slow");
  }
  const int32_t code = read_word(op.device, *op.stream, op.state_word(op.window.error_word), 0);
  if (code == 0) return;
  if (code == op.window.error_peer_timeout)
    throw Error(where + "a peer did not arrive at a dispatch/combine meeting within the peer timeout of " +
                    std::to_string(op.peer_timeout_ms) + " ms (the peer died, stalled, or skipped a call)",
                "every rank calls dispatch and combine the same number of times, and each comes within the timeout",
                "reset() on every rank before going on (or, if a rank died, build a new communicator and op from the "
                "survivors); raise EpDispatchCombineConfig.peer_timeout_s / EPJIT_PEER_TIMEOUT_S if ranks are slow");
  if (code == op.window.error_capacity_exceeded)
    throw Error(where + "more tokens arrived than the receive capacity of " + std::to_string(op.capacity()),
                "at most max_total_recv_tokens tokens per rank and call",
                "raise max_total_recv_tokens (0 = world_size * max_num_inp_token_per_rank)");
  if (code == op.window.error_expert_out_of_range)
    throw Error(where + "a dispatch met an expert index outside [0, " + std::to_string(op.config.num_experts()) + ")",
                "indices in [0, world_size * num_experts_per_rank), or -1 for no expert", "fix the router's indices");
  if (code == op.window.error_internode_count)
    throw Error(where + "an off-node rank's transfer said it sent more rows than its " +
                    std::to_string(op.internode ? op.internode->rows_per_peer() : 0) +
                    " slots (or a negative count), or a replayed routing's received count is smaller than what "
                    "the off-node ranks sent; those rows were dropped",
                "counts written by an epjit op of the same configuration on every rank",
                "build every rank's op from the same configuration and epjit build, and replay only routings "
                "recorded (or route_map()s saved) by this op; reset() to go on");
  throw Error(where + "a kernel reported error code " + std::to_string(code), "0", "report this as a bug");
}

void EpDispatchCombineOp::reset() {
  const OneCallAtATime one_call = impl_->one_call("reset");
  Impl& op = *impl_;
  start_collective(op.comm, "reset", [&] {
    op.require_open("reset");
    op.require_not_capturing("reset");
    op.stream->synchronize();
  });
  if (op.internode) op.internode->recover_transport(op.comm);
  for (auto [offset, bytes] : {std::pair{op.window.state, op.window.state_bytes},
                                {op.window.signals, op.window.signals_bytes},
                                {op.window.moe_counts, op.window.moe_counts_bytes},
                                {op.window.layout_counts, op.window.layout_counts_bytes},
                                {op.window.expert_count_buffers, op.window.expert_count_buffers_bytes},
                                {op.window.flagged_rows, op.window.flagged_rows_bytes},
                                {op.window.flagged_weights, op.window.flagged_weights_bytes}})
    if (bytes) op.device.fill_zero(op.local(offset), bytes, *op.stream);
  if (op.internode) op.internode->clear_outbox_state(*op.stream);
  op.write_peer_timeout();
  op.dispatched_tokens = -1;
  op.awaiting_dispatch_recv.reset();  // a split call's receive half is abandoned with its call
  op.awaiting_combine_recv.reset();
  op.comm.barrier();
}

void EpDispatchCombineOp::close(Memory memory) {
  const OneCallAtATime one_call = impl_->one_call("close");
  Impl& op = *impl_;
  if (op.closed) {
    // A close that kept the memory, then one that releases it (the communicator is going).
    if (memory == Memory::Release && !op.released) op.release();
    return;
  }
  // On return no peer reads this rank's window any more.
  start_collective(op.comm, "close", [&] {
    op.require_not_capturing("close");
    const std::unique_ptr<CaptureExemption> exemption = op.device.exempt_from_capture();  // as release()
    op.stream->synchronize();
  });
  op.closed = true;
  if (memory == Memory::Release) op.release();
}

}  // namespace epjit::ep
