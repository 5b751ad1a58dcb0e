"""deep_ep.Buffer (DeepEP's legacy API) over epjit's op: the normal mode here,
the low-latency calls in epjit.deep_ep.low_latency.

Each dispatch dtype and shape gets an epjit op (built at its first call, on the
buffer's communicator; a second when two of its dispatches are in flight) with
receive_order="source": the received rows are
grouped by source rank, each rank's in token order, as DeepEP's normal mode
delivers them, by the op's kernels (docs/EP.md "Receive order"), not by a sort
here; across nodes (a communicator whose nodes hold fewer ranks than the
group) the op runs epjit's internode v2_ll path in the same order, rank by
rank over the whole group, as DeepEP's internode dispatch delivers them. A
dispatch records its routing (keep_call), which the handle holds: a
dispatch with that handle replays it (the same rows in the same places, DeepEP's
cached mode), and combine answers it. Calls run on the buffer's communication
stream, ordered after `previous_event` (or torch's current stream), and the
current stream waits for them unless async_finish asks for an event instead.
What DeepEP does that this layer does not is refused with the reason
(docs/PYTHON.md "DeepEP").
"""
import contextlib
import logging

import epjit
from epjit._arrays import _torch_device

from . import low_latency as _low_latency
from ._common import _ids, _refuse, _torch
from .config import Config
from .utils.event import EventHandle, EventOverlap

_log = logging.getLogger("epjit.deep_ep")
_ON_THE_CURRENT_STREAM = contextlib.nullcontext()  # reusable: a call that needs no other stream
# Normal-mode ops per shape: two dispatches may await their combines (two
# micro-batches overlapped: SGLang's two-batch overlap, DeepSeek's prefill
# schedule), each on its own op; a third raises.
_OPS_PER_SHAPE = 2


class _Handle:
    """A normal-mode dispatch's handle: the op that ran it, its recorded routing
    (which also keeps the call's top-k indices), the rows it delivered here and
    the token count it was called with. Opaque to callers, as DeepEP's tuple is."""

    __slots__ = ("op", "routing", "received", "tokens", "worst", "__weakref__")

    def __init__(self, op, routing, received, tokens, worst):
        self.op, self.routing, self.received, self.tokens, self.worst = op, routing, received, tokens, worst

    def __getitem__(self, part):  # DeepEP's handle is a tuple its own tests read (handle[0]); this one is not
        _refuse(f"reading the normal-mode handle (handle[{part!r}])",
                "epjit's handle holds the op's recorded routing, not DeepEP's prefix matrices, source indices and "
                "send heads", "pass the handle back to dispatch or combine only; per-rank and per-expert counts "
                "come from get_dispatch_layout and dispatch's num_recv_tokens_per_expert_list")


class _ShapeOps(list):
    """A normal-mode shape's ops, and the config a further one is built with."""

    __slots__ = ("config",)

    def __init__(self, config, op):
        super().__init__((op,))
        self.config = config


class Buffer:
    """DeepEP's Buffer on epjit. `group` is a torch.distributed process group;
    DeepEP's other constructor arguments are checked and kept, or refused where
    they ask for something epjit does not do. epjit keywords: max_tokens_per_rank
    (the largest dispatch per rank; default: what num_nvl_bytes holds at the
    first call's row size, at most 8192), device, device_ordinal, target,
    timeout_seconds (as Communicator.from_process_group takes them)."""

    num_sms = 20

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False, num_qps_per_rank=24,
                 allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False, explicitly_destroy=False,
                 enable_shrink=False, comm=None, *, max_tokens_per_rank=None, **epjit_options):
        if group is None:
            if comm is not None:
                _refuse("Buffer(comm=<mpi4py communicator>)", "epjit joins ranks over a torch.distributed group",
                        "pass the torch process group as `group`")
            raise ValueError("Either 'group' or 'comm' must be provided.")
        if enable_shrink:
            _refuse("enable_shrink=True", "epjit has no rank mask (a dead peer is a reported timeout)",
                    "leave enable_shrink off")
        if max_tokens_per_rank is not None and max_tokens_per_rank <= 0:
            raise ValueError(f"max_tokens_per_rank={max_tokens_per_rank}: expected a positive token count")
        torch = _torch()
        self.group = group
        self.rank, self.group_size = group.rank(), group.size()
        self.num_nvl_bytes, self.num_rdma_bytes = int(num_nvl_bytes), int(num_rdma_bytes)
        self.low_latency_mode = bool(low_latency_mode)
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = False
        self._max_tokens = max_tokens_per_rank
        options = dict(epjit_options)
        if "device" not in options and "target" not in options:
            options["device"], ordinal = _torch_device()
            options.setdefault("device_ordinal", ordinal)
        self._comm = epjit.Communicator.from_process_group(group, **options)
        self._gpu = self._comm.device in ("cuda", "hip")
        # Nodes as the communicator found them (by hostname, or its gpu_per_node=).
        self._per_node = self._comm.node_size
        if self.group_size % self._per_node:
            self._comm.destroy()
            raise ValueError(f"the group's {self.group_size} ranks are not whole nodes of {self._per_node} (expected "
                             "every node to hold as many ranks; fix: equal ranks per node, or gpu_per_node=)")
        self._nodes = self.group_size // self._per_node
        self._ops = {}           # (dtype, hidden, scale columns, top-k, experts) -> its ops (_OPS_PER_SHAPE at most)
        self._op_tokens = {}     # op -> its max_num_inp_token_per_rank (and membership: this buffer's ops)
        self._latest = {}        # op -> the handle of its dispatch awaiting combine
        self._counted = {}       # op -> whether that dispatch read its received count (received_counts)
        self._weights = {}       # op -> [capacity, top-k] f32 staging for combine's weights
        self._comm_stream = torch.cuda.Stream() if self._gpu else None
        self._low_latency = _low_latency.LowLatency(self)
        self._ones = {}          # device -> int32 ones, the most entries seen (get_dispatch_layout's counting)
        self._zero_weights = {}  # op -> [max tokens, top-k] f32 zeros: the weights of calls without any
        self._layout_ops = {}    # (top-k, experts) -> an op whose kernel computes get_dispatch_layout
        self._layout_fallback_logged = False

    # ------------------------------------------------------------ settings
    @staticmethod
    def is_sm90_compiled():
        return True

    @staticmethod
    def set_num_sms(new_num_sms):
        """The SMs of later-built ops' dispatch and combine (their block counts)."""
        assert new_num_sms % 2 == 0, "The SM count must be even"
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture():
        return EventOverlap(EventHandle())

    @staticmethod
    def get_dispatch_config(num_ranks):
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks):
        return Config(Buffer.num_sms, 4, 256, 6, 128)

    def get_comm_stream(self):
        """The stream the buffer's calls run on (None on host ranks: their calls are final on return)."""
        return self._comm_stream

    def get_local_buffer_tensor(self, dtype, size=None, offset=0, use_rdma_buffer=False):
        _refuse("get_local_buffer_tensor", "epjit's window is laid out by its kernels' interface record, not a raw "
                "byte buffer", "use the tensors dispatch and combine return")

    # DeepEP's rank masks (its shrink mode, refused at construction): epjit does not
    # drop a rank from a call; a dead or slow peer is a reported timeout instead.
    def low_latency_update_mask_buffer(self, rank_to_mask, mask=False):
        self._refuse_masks("low_latency_update_mask_buffer")

    def low_latency_query_mask_buffer(self, mask_status):
        self._refuse_masks("low_latency_query_mask_buffer")

    def low_latency_clean_mask_buffer(self):
        self._refuse_masks("low_latency_clean_mask_buffer")

    @staticmethod
    def _refuse_masks(call):
        _refuse(call, "epjit has no rank mask (a dead peer is a reported timeout, check() names it)",
                "leave every rank in the group; after a timeout that names a dead rank, build a new group, Buffer and "
                "communicator from the survivors (docs/EP.md \"How ranks meet\")")

    def destroy(self):
        assert self.explicitly_destroy, "`explicitly_destroy` flag must be set"
        self._close()

    def _close(self):
        self._low_latency.close()
        for op in self._op_tokens:
            op.close()
        self._ops.clear()
        self._op_tokens.clear()
        self._latest.clear()
        self._counted.clear()
        self._weights.clear()
        self._zero_weights.clear()
        self._layout_ops.clear()
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None

    # ------------------------------------------------------------ streams
    def _begin(self, previous_event, async_finish):
        """The stream context a call runs in. With async_finish, the buffer's own
        stream, ordered after previous_event (else torch's current stream), as
        DeepEP runs it. Without, torch's current stream after previous_event: DeepEP
        would make the current stream wait for its stream at once, so running there
        gives the same order without the hop between streams."""
        if not self._gpu:
            return _ON_THE_CURRENT_STREAM
        torch = _torch()
        waits_for = None
        if previous_event is not None and previous_event.event is not None:
            waits_for = previous_event.event._event
        if not async_finish:
            if waits_for is not None:
                torch.cuda.current_stream().wait_event(waits_for)
            return _ON_THE_CURRENT_STREAM
        if waits_for is not None:
            self._comm_stream.wait_event(waits_for)
        else:
            self._comm_stream.wait_stream(torch.cuda.current_stream())
        return torch.cuda.stream(self._comm_stream)

    def _finish(self, async_finish, inputs, outputs):
        """The call's event: with async_finish one recorded on the buffer's stream
        (its tensors recorded on the streams that use them next), else none (the
        call ran on the current stream, DeepEP's EventOverlap(None))."""
        if not async_finish:
            return EventOverlap(None)
        if not self._gpu:
            return EventOverlap(EventHandle())
        torch = _torch()
        event = EventHandle(self._comm_stream)
        current = torch.cuda.current_stream()
        for tensor in outputs:
            if tensor is not None:
                tensor.record_stream(current)
        for tensor in inputs:
            if tensor is not None:
                tensor.record_stream(self._comm_stream)
        return EventOverlap(event, tuple(t for t in inputs + outputs if t is not None))

    # ------------------------------------------------------------ the ops
    def _op_for(self, x, x_scales, topk, num_experts, tokens):
        # A shape seen before: one of its ops, with no checks they passed when built.
        scale_columns = 0 if x_scales is None else x_scales.shape[-1] if x_scales.dim() else -1
        ops = self._ops.get((x.dtype, x.shape[1], scale_columns, topk, num_experts))
        if ops is not None and tokens <= self._op_tokens[ops[0]]:
            return self._free_op(ops)
        torch = _torch()
        if num_experts % self.group_size:
            raise ValueError(f"num_experts={num_experts} is not a multiple of the group's {self.group_size} ranks "
                             "(expected every rank to hold the same number of experts)")
        fp8 = x.dtype.itemsize == 1 and x.dtype.is_floating_point
        if fp8:
            if x_scales is None or x_scales.dtype != torch.float32 or x_scales.dim() != 2:
                raise ValueError("fp8 x needs its scales as (x, x_scales), x_scales [tokens, hidden // 128] float32 "
                                 f"(got {None if x_scales is None else (x_scales.dtype, tuple(x_scales.shape))})")
        elif x.dtype != torch.bfloat16:
            raise ValueError(f"x is {x.dtype}: DeepEP's normal mode moves bfloat16 tokens, or fp8 ones with scales")
        hidden = x.shape[1]
        scale_dim = x_scales.shape[1] if fp8 else 0
        key = (x.dtype, hidden, scale_dim, topk, num_experts)
        ops = self._ops.get(key)
        if ops is not None and tokens <= self._op_tokens[ops[0]]:
            return self._free_op(ops)
        if ops is not None:
            raise ValueError(f"dispatch of {tokens} tokens on rank {self.rank}: this buffer's op for this shape was "
                             f"built for at most {self._op_tokens[ops[0]]} tokens per rank (expected at "
                             "most that; fix: build the Buffer with max_tokens_per_rank= the largest batch)")
        row_bytes = hidden * x.dtype.itemsize + scale_dim * 4
        limit = self._max_tokens
        if limit is None:
            fits = self.num_nvl_bytes // max(1, self.group_size * row_bytes) if self.num_nvl_bytes else 8192
            limit = max(1, min(8192, fits))
        if tokens > limit:
            raise ValueError(f"dispatch of {tokens} tokens on rank {self.rank}: num_nvl_bytes={self.num_nvl_bytes} "
                             f"holds {limit} tokens per rank of {row_bytes} bytes (expected at most that; fix: a "
                             "larger num_nvl_bytes, or Buffer(..., max_tokens_per_rank=N), an epjit keyword)")
        fields = dict(rank=self.rank, world_size=self.group_size, hidden_dim=hidden, max_num_inp_token_per_rank=limit,
                      num_experts_per_rank=num_experts // self.group_size, num_experts_per_token=topk,
                      data_type=x.dtype, receive_order="source",
                      dispatch_block_num=Buffer.num_sms, combine_block_num=Buffer.num_sms)
        if self._nodes > 1:
            # Source order across nodes runs v2_ll's transfers (docs/EP.md "Receive order").
            fields.update(gpu_per_node=self._per_node, internode_kernel="v2_ll")
        if fp8:
            fields.update(scale_dim=scale_dim, scale_type_size=4)
        config = epjit.EpDispatchCombineConfig(**fields)
        op = self._build_op(config)
        self._ops[key] = _ShapeOps(config, op)
        self._layout_ops.setdefault((topk, num_experts), op)
        return op

    def _build_op(self, config):
        op = epjit.EpDispatchCombineOp(config, self._comm)
        self._op_tokens[op] = config.max_num_inp_token_per_rank
        _log.info("deep_ep.Buffer: rank %d built an op for %s, hidden %d, top-%d, %d experts per rank, %d tokens per "
                  "rank", self.rank, config.dispatch_type, config.hidden_dim, config.num_experts_per_token,
                  config.num_experts_per_rank, config.max_num_inp_token_per_rank)
        return op

    def _free_op(self, ops):
        """The shape's op for a new dispatch: one with no dispatch awaiting combine,
        else a new one while the shape has fewer than _OPS_PER_SHAPE (every rank
        builds it at the same call: ranks call in the same order)."""
        for op in ops:
            if op not in self._latest:
                return op
        if len(ops) == _OPS_PER_SHAPE:
            raise ValueError(f"dispatch on rank {self.rank} while {_OPS_PER_SHAPE} dispatches of this shape await "
                             f"their combines (expected at most {_OPS_PER_SHAPE} in flight, one per op of the "
                             "shape; fix: combine one of them first)")
        ops.append(self._build_op(ops.config))
        return ops[-1]

    def _unweighted(self, op, device):
        """[max tokens, top-k] float32 zeros: what a dispatch without weights sends."""
        zeros = self._zero_weights.get(op)
        if zeros is None:
            zeros = self._zero_weights[op] = _torch().zeros(op._config.max_num_inp_token_per_rank,
                                                            op._config.num_experts_per_token, dtype=_torch().float32,
                                                            device=device)
        return zeros

    # ------------------------------------------------------------ normal mode
    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        """(num_tokens_per_rank [ranks] int32, num_tokens_per_rdma_rank [nodes] int32 (None
        on one node), num_tokens_per_expert [experts] int32, is_token_in_rank [tokens,
        ranks] bool, event); -1 selects nothing."""
        torch = _torch()
        if num_experts % self.group_size:
            raise ValueError(f"num_experts={num_experts} is not a multiple of the group's {self.group_size} ranks")
        world = self.group_size
        layout_op = self._layout_ops.get((topk_idx.shape[1], num_experts))
        with self._begin(previous_event, async_finish):
            if layout_op is not None:
                device = topk_idx.device
                num_tokens_per_rank = torch.empty(world, dtype=torch.int32, device=device)
                num_tokens_per_expert = torch.empty(num_experts, dtype=torch.int32, device=device)
                is_token_in_rank = torch.empty(topk_idx.shape[0], world, dtype=torch.bool, device=device)
                per_node = (None if self._nodes == 1 else
                            torch.empty(self._nodes, dtype=torch.int32, device=device))
                indices = topk_idx if topk_idx.dtype == torch.int64 else topk_idx.long()
                layout_op.dispatch_layout(indices.contiguous(), num_tokens_per_rank, num_tokens_per_expert,
                                          is_token_in_rank, per_node=per_node)
        if layout_op is not None:
            event = EventOverlap(None) if not async_finish else self._finish(
                async_finish, [topk_idx], [num_tokens_per_rank, per_node, num_tokens_per_expert, is_token_in_rank])
            return num_tokens_per_rank, per_node, num_tokens_per_expert, is_token_in_rank, event
        if not self._layout_fallback_logged:
            self._layout_fallback_logged = True
            _log.info("deep_ep.Buffer.get_dispatch_layout: no op of top-%d and %d experts is built yet on rank %d, "
                      "so this layout runs as torch ops (the same counts); once a dispatch of this shape has run, "
                      "the op's kernel computes it", topk_idx.shape[1], num_experts, self.rank)
        with self._begin(previous_event, async_finish):
            # -1 (no expert) becomes expert num_experts, whose "rank" is the group's
            # size: one extra column and one extra counter, dropped at the end.
            experts = torch.where(topk_idx >= 0, topk_idx, num_experts).long()
            in_rank = torch.zeros(topk_idx.shape[0], world + 1, dtype=torch.bool, device=topk_idx.device)
            in_rank.scatter_(1, experts // (num_experts // world), True)
            is_token_in_rank = in_rank[:, :world].contiguous()
            num_tokens_per_rank = is_token_in_rank.sum(0, dtype=torch.int32)
            ones = self._ones.get(topk_idx.device)
            if ones is None or ones.numel() < experts.numel():
                ones = self._ones[topk_idx.device] = torch.ones(experts.numel(), dtype=torch.int32,
                                                                device=topk_idx.device)
            counts = torch.zeros(num_experts + 1, dtype=torch.int32, device=topk_idx.device)
            counts.scatter_add_(0, experts.reshape(-1), ones[:experts.numel()])
            num_tokens_per_expert = counts[:num_experts]
            per_node = None
            if self._nodes > 1:
                per_node = is_token_in_rank.view(-1, self._nodes, self._per_node).any(2).sum(0, dtype=torch.int32)
        event = self._finish(async_finish, [topk_idx],
                             [num_tokens_per_rank, per_node, num_tokens_per_expert, is_token_in_rank])
        return num_tokens_per_rank, per_node, num_tokens_per_expert, is_token_in_rank, event

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None, is_token_in_rank=None,
                 num_tokens_per_expert=None, topk_idx=None, topk_weights=None, expert_alignment=1, num_worst_tokens=0,
                 config=None, previous_event=None, async_finish=False, allocate_on_comm_stream=False):
        """DeepEP's normal-mode dispatch; see DeepEP's docs. Returns (recv_x or
        (recv_x, recv_x_scales), recv_topk_idx, recv_topk_weights,
        num_recv_tokens_per_expert_list, handle, event)."""
        torch = _torch()
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        if handle is not None:
            return self._cached_dispatch(x, x_scales, handle, num_worst_tokens, previous_event, async_finish)
        if topk_idx is None or num_tokens_per_expert is None:
            raise ValueError("dispatch without a handle needs topk_idx and num_tokens_per_expert "
                             "(get_dispatch_layout's), as DeepEP's does")
        if expert_alignment < 1:
            raise ValueError(f"expert_alignment={expert_alignment}: expected at least 1")
        tokens, topk = topk_idx.shape
        if x.shape[0] != tokens or (topk_weights is not None and topk_weights.shape != (tokens, topk)):
            raise ValueError(f"x has {x.shape[0]} rows, topk_idx {tuple(topk_idx.shape)}, topk_weights "
                             f"{None if topk_weights is None else tuple(topk_weights.shape)} (expected one row each)")
        num_experts = num_tokens_per_expert.numel()
        op = self._op_for(x, x_scales, topk, num_experts, tokens)
        if num_worst_tokens and num_worst_tokens > op.capacity:
            raise ValueError(f"num_worst_tokens={num_worst_tokens} is more than this rank can receive "
                             f"({op.capacity}) (expected at most that)")
        with self._begin(previous_event, async_finish):
            indices = _ids(topk_idx)
            if topk_weights is None:
                weights = self._unweighted(op, x.device)[:tokens]
            else:
                weights = topk_weights if topk_weights.dtype == torch.float32 else topk_weights.float()
            routing = op.dispatch(x.contiguous(), weights.contiguous(),
                                  None if x_scales is None else x_scales.contiguous(), indices.contiguous(),
                                  return_routing=True, keep_call=True)[-1]
            counts = []
            if num_worst_tokens:
                received = num_worst_tokens
            else:
                # DeepEP's normal mode synchronizes here too: the received count and
                # the experts' counts (padded to expert_alignment) in one read.
                received, counts = op.received_counts(expert_alignment=expert_alignment)
            # The rows, their scales, local ids and weights into tensors of the
            # caller's, by the op's kernel (-1 / 0 for experts elsewhere and for
            # rows past the received count).
            device = x.device
            recv_x = torch.empty(received, x.shape[1], dtype=x.dtype, device=device)
            recv_x_scales = (None if x_scales is None else
                             torch.empty(received, x_scales.shape[1], dtype=torch.float32, device=device))
            recv_topk_idx = torch.empty(received, topk, dtype=torch.int64, device=device)
            recv_topk_weights = (None if topk_weights is None else
                                 torch.empty(received, topk, dtype=torch.float32, device=device))
            op.deliver_received(recv_x, recv_topk_idx, scales=recv_x_scales, weights=recv_topk_weights)
            if topk_idx.dtype != torch.int64:
                recv_topk_idx = recv_topk_idx.to(topk_idx.dtype)
        new_handle = _Handle(op, routing, received, tokens, num_worst_tokens)
        self._latest[op] = new_handle
        self._counted[op] = not num_worst_tokens
        event = EventOverlap(None) if not async_finish else self._finish(
            async_finish, [x, x_scales, topk_idx, topk_weights], [recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights])
        return ((recv_x, recv_x_scales) if x_scales is not None else recv_x, recv_topk_idx, recv_topk_weights,
                counts, new_handle, event)

    def _cached_dispatch(self, x, x_scales, handle, num_worst_tokens, previous_event, async_finish):
        torch = _torch()
        if not isinstance(handle, _Handle) or handle.op not in self._op_tokens:
            raise ValueError("dispatch(handle=...) with a handle this buffer did not return (expected the handle "
                             "of one of its dispatches)")
        op = handle.op
        if x.shape[0] != handle.tokens:
            raise ValueError(f"cached dispatch of {x.shape[0]} tokens with a handle of {handle.tokens} (expected the "
                             "handle's batch)")
        with self._begin(previous_event, async_finish):
            _, _, indices = op.recorded_call(handle.routing)
            weights = self._unweighted(op, x.device)[:handle.tokens]
            op.dispatch(x.contiguous(), weights, None if x_scales is None else x_scales.contiguous(), indices,
                        routing=handle.routing)
            recv_x = torch.empty(handle.received, x.shape[1], dtype=x.dtype, device=x.device)
            recv_x_scales = (None if x_scales is None else
                             torch.empty(handle.received, x_scales.shape[1], dtype=torch.float32, device=x.device))
            op.deliver_received(recv_x, scales=recv_x_scales)
        self._latest[op] = handle
        self._counted[op] = False
        event = self._finish(async_finish, [x, x_scales], [recv_x, recv_x_scales])
        return (recv_x, recv_x_scales) if x_scales is not None else recv_x, None, None, None, None, event

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None, async_finish=False,
                allocate_on_comm_stream=False):
        """DeepEP's normal-mode combine: each token's rows from the ranks it went to,
        summed (no weights), topk_weights summed likewise; returns (combined_x,
        combined_topk_weights or None, event)."""
        torch = _torch()
        if not isinstance(handle, _Handle) or handle.op not in self._op_tokens:
            raise ValueError("combine with a handle this buffer did not return (expected a dispatch's handle)")
        op = handle.op
        if self._latest.get(op) is not handle:
            raise ValueError("combine(handle) for a dispatch that is not the latest on its op: it was combined "
                             "already, or a cached dispatch of another handle ran on its op since (expected each "
                             "dispatch combined once, before a cached dispatch reuses its op; fix: dispatch with this "
                             "handle again first)")
        if x.dim() != 2 or x.shape[0] != handle.received or x.dtype != torch.bfloat16:
            raise ValueError(f"combine x is {x.dtype} {tuple(x.shape)}: expected bfloat16 [{handle.received}, hidden] "
                             "(the dispatch's received rows)")
        bias_0, bias_1 = (bias if isinstance(bias, tuple) else (bias, None))
        with self._begin(previous_event, async_finish):
            weights = combined_topk_weights = None
            if not self._counted.get(op):
                # The op never read this call's received count (num_worst_tokens, a
                # cached dispatch): it takes capacity rows, so the rows and weights
                # go to its window first.
                staged = op.combine_input()
                staged[:handle.received] = x
                if topk_weights is not None:
                    weights = self._weights.get(op)
                    if weights is None:
                        weights = self._weights[op] = torch.zeros(op.capacity, topk_weights.shape[1],
                                                                  dtype=torch.float32, device=x.device)
                    weights[:handle.received] = topk_weights
            else:
                # The op read the received count at the dispatch (received_counts):
                # it takes that many rows where they are (its kernel stages them).
                staged = x if x.is_contiguous() else x.contiguous()
                if topk_weights is not None:
                    weights = topk_weights if topk_weights.dtype == torch.float32 else topk_weights.float()
                    weights = weights.contiguous()
            device = x.device
            if topk_weights is not None:
                combined_topk_weights = torch.empty(handle.tokens, topk_weights.shape[1], dtype=torch.float32,
                                                    device=device)
            combined_x = torch.empty(handle.tokens, x.shape[1], dtype=torch.bfloat16, device=device)
            op.combine(staged, weights, output=combined_x, output_weights=combined_topk_weights)
            for extra in (bias_0, bias_1):
                if extra is not None:
                    combined_x = (combined_x.float() + extra.float()).to(torch.bfloat16)
        self._latest.pop(op, None)
        event = EventOverlap(None) if not async_finish else self._finish(
            async_finish, [x, topk_weights, bias_0, bias_1], [combined_x, combined_topk_weights])
        return combined_x, combined_topk_weights, event

    # ------------------------------------------------------------ low latency
    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts):
        """DeepEP's formula, for programs that size num_rdma_bytes with it (epjit
        sizes its own windows and does not read num_rdma_bytes)."""
        return _low_latency.size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts)

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8=True, round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False):
        """DeepEP's low-latency dispatch on torch's current stream: (recv_x [local experts,
        ranks * num_max_dispatch_tokens_per_rank, hidden] (or (codes, scales) with fp8),
        recv_count [local experts] int32, handle, event, hook or None). See
        epjit.deep_ep.low_latency."""
        return self._low_latency.dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                          cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats, use_fp8,
                                          round_scale, use_ue8m0, async_finish, return_recv_hook)

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False, zero_copy=False,
                            async_finish=False, return_recv_hook=False, out=None, combine_wait_recv_cost_stats=None):
        """DeepEP's low-latency combine: each token's expert rows times its topk_weights,
        summed in top-k order (DeepEP's bits); (combined_x [tokens, hidden] bfloat16 (`out`
        when given), event, hook or None)."""
        return self._low_latency.combine(x, topk_idx, topk_weights, handle, use_logfmt, zero_copy, async_finish,
                                         return_recv_hook, out, combine_wait_recv_cost_stats)

    def get_next_low_latency_combine_buffer(self, handle):
        """The window tensor [local experts, ranks * num_max_dispatch_tokens_per_rank, hidden]
        bf16 the handle's combine reads when zero_copy=True: experts write here."""
        return self._low_latency.next_combine_buffer(handle)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank, hidden, num_experts):
        """Nothing to clean: epjit's low-latency ops keep no flags between calls that a
        normal-mode call could leave dirty (each call's epoch is new)."""
        return None

    def _low_latency_event(self, async_finish, tensors):
        if not async_finish:
            return EventOverlap(None)
        if not self._gpu:
            return EventOverlap(EventHandle())
        torch = _torch()
        return EventOverlap(EventHandle(torch.cuda.current_stream()), tensors)

    def internode_dispatch(self, *args, **kwargs):
        """DeepEP's internode dispatch: what dispatch runs across nodes (its arguments)."""
        self._require_nodes("internode_dispatch")
        return self.dispatch(*args, **kwargs)

    def internode_combine(self, *args, **kwargs):
        """DeepEP's internode combine: what combine runs across nodes (its arguments)."""
        self._require_nodes("internode_combine")
        return self.combine(*args, **kwargs)

    def _require_nodes(self, call):
        if self._nodes == 1:
            raise ValueError(f"{call} on a group of one node ({self.group_size} ranks): DeepEP runs it only across "
                             "nodes (expected several; fix: call dispatch / combine, which pick the path)")
