"""deep_ep.Buffer's low-latency calls over epjit's standard-MoE op.

Each (hidden, top-k, experts, num_max_dispatch_tokens_per_rank) gets two epjit
ops, used in turn as DeepEP uses its two low-latency buffers: a call's results
stay valid until the second next call, and no more than two dispatches may
await their combines. The ops are built with enable_std_moe and
std_moe_combine="weighted_entries": dispatch + std_moe_pack give DeepEP's
layout [num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank,
hidden] with per-expert counts, and the combine returns each (token, expert)
row to its origin, which sums them with its own top-k weights in top-k order
(fused multiply-adds from +0.0, rounded once: DeepEP's bits), all by the op's
kernels. With use_fp8 the op's std_moe_quant also casts the packed rows to
OCP E4M3 with DeepEP's per-128 scales (float, power-of-two float, or UE8M0
bytes four to an int32) in DeepEP's column-major layout: its codes and
scales bit for bit. The calls run on torch's current stream, as DeepEP's do; the hook of
return_recv_hook is the op's receive half (dispatch_recv + std_moe_pack, or
combine_recv), so work queued between the call and the hook overlaps the
transfers. Differences from DeepEP: docs/PYTHON.md "DeepEP".
"""
import epjit

from ._common import _ids, _refuse, _torch


class LowLatencyHandle(tuple):
    """DeepEP's low-latency handle: (src_info, layout_range, num_max_dispatch_tokens_per_rank,
    hidden, num_experts). src_info is epjit's source map (the receive row of each
    packed row, not DeepEP's source token index) and layout_range is None; the
    op that ran the dispatch rides along."""

    def __new__(cls, sources, max_tokens, hidden, num_experts, op):
        handle = super().__new__(cls, (sources, None, max_tokens, hidden, num_experts))
        handle.op = op
        return handle


def size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts):
    """DeepEP's get_low_latency_rdma_size_hint, by its formula (LowLatencyLayout):
    what a program sizes num_rdma_bytes with. epjit sizes its own windows."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(num_max_dispatch_tokens_per_rank * dispatch_msg, num_experts * num_max_dispatch_tokens_per_rank * combine_msg)
    recv = num_experts * num_max_dispatch_tokens_per_rank * max(dispatch_msg, combine_msg)
    signaling = (num_experts * 4 + 127) // 128 * 128
    total = 2 * send + 2 * recv + 2 * signaling
    return (total + 128) // 128 * 128


class LowLatency:
    """The low-latency half of a Buffer: its ops, by shape, two of each."""

    def __init__(self, buffer):
        self._buffer = buffer
        self._ops = {}      # key -> [op, op]
        self._turn = {}     # key -> the index of the op the next dispatch takes
        self._zeros = {}    # op -> [max tokens, top-k] f32 zeros (the dispatch's unused weights); its keys are the ops

    def close(self):
        for op in self._zeros:
            op.close()
        self._ops.clear()
        self._turn.clear()
        self._zeros.clear()

    def _next_op(self, x, topk, num_experts, max_tokens, quant):
        buffer = self._buffer
        world = buffer.group_size
        if buffer._nodes > 1:
            _refuse("the low-latency mode across nodes", "its combine (each token's rows times its weights, summed "
                    "in top-k order: std_moe_combine weighted_entries) and fp8 pack run on one node in epjit",
                    "run the low-latency mode within a node, or use the normal mode (dispatch / combine), which "
                    "runs across nodes")
        if num_experts % world:
            raise ValueError(f"num_experts={num_experts} is not a multiple of the group's {world} ranks "
                             "(expected every rank to hold the same number of experts)")
        hidden = x.shape[1]
        key = (hidden, topk, num_experts, max_tokens, quant)
        pair = self._ops.setdefault(key, [None, None])
        turn = self._turn.get(key, 0)
        self._turn[key] = turn ^ 1
        op = pair[turn]
        if op is None:
            config = epjit.EpDispatchCombineConfig(
                rank=buffer.rank, world_size=world, hidden_dim=hidden, max_num_inp_token_per_rank=max_tokens,
                num_experts_per_rank=num_experts // world, num_experts_per_token=topk, data_type="bf16",
                enable_std_moe=True, std_moe_combine="weighted_entries", std_moe_quant=quant,
                dispatch_block_num=buffer.num_sms, combine_block_num=buffer.num_sms)
            op = pair[turn] = epjit.EpDispatchCombineOp(config, buffer._comm)
            self._zeros[op] = _torch().zeros(max_tokens, topk, dtype=_torch().float32, device=x.device)
        return op

    def dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                 cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None, use_fp8=True,
                 round_scale=False, use_ue8m0=False, async_finish=False, return_recv_hook=False):
        torch = _torch()
        if dispatch_wait_recv_cost_stats is not None:
            _refuse("dispatch_wait_recv_cost_stats", "epjit's kernels keep no per-peer wait clocks",
                    "leave it None (epjit-bench and the op's check() report slow or dead peers)")
        if use_ue8m0 and not round_scale:
            raise AssertionError("UE8M0 SF requires `round_scale=True`")
        quant = "none"
        if use_fp8:
            quant = "deepep_fp8_ue8m0" if use_ue8m0 else "deepep_fp8_pow2" if round_scale else "deepep_fp8"
        if x.dim() != 2 or x.dtype != torch.bfloat16:
            raise ValueError(f"x is {x.dtype} {tuple(x.shape)}: low_latency_dispatch moves bfloat16 [tokens, hidden]")
        tokens, topk = topk_idx.shape
        if x.shape[0] != tokens:
            raise ValueError(f"x has {x.shape[0]} rows, topk_idx {tuple(topk_idx.shape)} (expected one row each)")
        if tokens > num_max_dispatch_tokens_per_rank:
            raise ValueError(f"{tokens} tokens: more than num_max_dispatch_tokens_per_rank="
                             f"{num_max_dispatch_tokens_per_rank} (expected at most that, on every rank)")
        op = self._next_op(x, topk, num_experts, num_max_dispatch_tokens_per_rank, quant)
        indices = _ids(topk_idx)
        weights = self._zeros[op][:tokens]
        stats = cumulative_local_expert_recv_stats

        def pack():
            packed = op.std_moe_pack()
            if stats is not None:
                stats.add_(packed[1])
            return packed

        hook = None
        if return_recv_hook:
            op.dispatch_send(x, weights, None, indices)
            packed = op.std_moe_outputs()

            def hook():
                op.dispatch_recv()
                pack()
        else:
            op.dispatch(x, weights, None, indices)
            packed = pack()
        recv_x, recv_count, sources = packed
        if use_fp8:
            codes, scales = op.std_moe_fp8()
            recv_x = (codes, scales.transpose(1, 2))  # DeepEP's [experts, rows, scales] view, column-major
        handle = LowLatencyHandle(sources, num_max_dispatch_tokens_per_rank, x.shape[1], num_experts, op)
        event = self._buffer._low_latency_event(async_finish, (x, topk_idx, recv_x, recv_count))
        return recv_x, recv_count, handle, event, hook

    def combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False, zero_copy=False, async_finish=False,
                return_recv_hook=False, out=None, combine_wait_recv_cost_stats=None):
        torch = _torch()
        if use_logfmt:
            _refuse("low_latency_combine(use_logfmt=True)", "epjit's combine moves bf16 rows, not DeepEP's 10-bit "
                    "LogFMT", "leave use_logfmt False")
        if combine_wait_recv_cost_stats is not None:
            _refuse("combine_wait_recv_cost_stats", "epjit's kernels keep no per-peer wait clocks", "leave it None")
        if not isinstance(handle, LowLatencyHandle) or handle.op not in self._zeros:
            raise ValueError("low_latency_combine with a handle this buffer's low_latency_dispatch did not return")
        op = handle.op
        tokens = topk_idx.shape[0]
        expert_out = op.std_moe_combine_input() if zero_copy else x
        weights = topk_weights if topk_weights.dtype == torch.float32 else topk_weights.float()
        indices = _ids(topk_idx)
        if out is None:
            out = torch.empty(tokens, handle[3], dtype=torch.bfloat16, device=topk_idx.device)
        hook = None
        if return_recv_hook:
            op.std_moe_combine_send(expert_out, weights, indices, out)

            def hook():
                op.combine_recv()
        else:
            op.std_moe_combine(expert_out, weights, indices, out)
        event = self._buffer._low_latency_event(async_finish, (x, topk_idx, topk_weights, out))
        return out, event, hook

    def next_combine_buffer(self, handle):
        if not isinstance(handle, LowLatencyHandle) or handle.op not in self._zeros:
            raise ValueError("get_next_low_latency_combine_buffer with a handle this buffer did not return")
        return handle.op.std_moe_combine_input()

