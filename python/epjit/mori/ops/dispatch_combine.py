"""MORI's first (v1) dispatch/combine API, `mori.ops.EpDispatchCombineOp`, on epjit.

The API vLLM's, SGLang's and AITER's MORI backends call. What it adds over EPv2
(which `dispatch_combine_v2` serves, and which this layer runs on):

- the op is built from its config alone, on the process's communicator
  (`mori.shmem.shmem_torch_process_group_init`);
- the token dtype comes from each call's input (`data_type` is only the first
  one): an epjit op per dispatch dtype, built on first use (collective, as every
  rank dispatches the same dtype);
- `kernel_type` picks intranode or internode (v2 for InterNode/InterNodeV1,
  v2_ll for InterNodeV1LL), AsyncLL splits dispatch and combine into their halves;
- combine takes the weights to send back (per received row) and this rank's own
  dispatch indices, and returns its sums in the input's dtype;
- flat token indices are MORI's: rank * max_num_tokens_to_send() + token.

Launch geometry (block_num, warp_num_per_block, rdma_block_num, num_qp_per_pe and
the per-call counts) is MORI's kernels'; epjit's kernels take their measured
geometry, so these are accepted and do not change anything (logged once).
docs/PYTHON.md lists every difference from MORI.
"""
import enum
import logging
from dataclasses import dataclass
from typing import Optional

import epjit

from .. import shmem
from ..cco import _log_once
from .dispatch_combine_v2 import config as _v2_config
from .dispatch_combine_v2.dispatch_combine_op import EpDispatchCombineOp as _V2Op
from .dispatch_combine_v2.dispatch_combine_op import EpDispatchRoutingHandle as _V2Handle

_log = logging.getLogger("epjit.mori")


def _torch():
    import torch
    return torch


class EpDispatchCombineKernelType(enum.IntEnum):
    IntraNode = 0
    InterNode = 1
    InterNodeV1 = 2
    InterNodeV1LL = 3
    AsyncLL = 4
    IntraNodeLL = 5

    def __str__(self):
        return self.name


class EpDispatchCombineQuantType(enum.IntEnum):
    None_ = 0
    Fp8DirectCast = 1
    Fp8BlockwiseQuant = 2
    Fp4BlockwiseQuant = 3

    def __str__(self):
        return self.name


_QUANT_NAMES = {
    "none": EpDispatchCombineQuantType.None_,
    "fp8_direct_cast": EpDispatchCombineQuantType.Fp8DirectCast,
    "fp8_blockwise": EpDispatchCombineQuantType.Fp8BlockwiseQuant,
    "fp4_blockwise": EpDispatchCombineQuantType.Fp4BlockwiseQuant,
}
_EPV2_QUANT = {EpDispatchCombineQuantType.None_: "none", EpDispatchCombineQuantType.Fp8DirectCast: "fp8_direct_cast",
               EpDispatchCombineQuantType.Fp8BlockwiseQuant: "fp8_blockwise"}
_INTRANODE_KINDS = (EpDispatchCombineKernelType.IntraNode, EpDispatchCombineKernelType.IntraNodeLL,
                    EpDispatchCombineKernelType.AsyncLL)
# The internode kernel epjit runs for each of MORI's (docs/EP.md "Internode").
_INTERNODE_KERNEL = {
    EpDispatchCombineKernelType.InterNode: "v2",
    EpDispatchCombineKernelType.InterNodeV1: "v2",
    EpDispatchCombineKernelType.InterNodeV1LL: "v2_ll",
    EpDispatchCombineKernelType.AsyncLL: "v2_ll",
}
_ROUTING_KINDS = (EpDispatchCombineKernelType.IntraNode, EpDispatchCombineKernelType.InterNodeV1)
_STD_MOE_KINDS = (EpDispatchCombineKernelType.IntraNode, EpDispatchCombineKernelType.InterNodeV1LL)


def _quant_type(quant_type):
    if isinstance(quant_type, EpDispatchCombineQuantType):
        return quant_type
    if isinstance(quant_type, str) and quant_type.strip().lower() in _QUANT_NAMES:
        return _QUANT_NAMES[quant_type.strip().lower()]
    raise ValueError(f"invalid quant_type '{quant_type}', expected one of {list(_QUANT_NAMES)}")


@dataclass
class EpDispatchCombineConfig:
    """MORI's v1 config: the same fields and defaults. data_type is deprecated in
    MORI too (each call's input decides); here it is the dtype whose epjit op is
    built with the op, the others on first use."""
    data_type: object
    rank: int
    world_size: int
    hidden_dim: int
    scale_dim: int
    scale_type_size: int
    max_token_type_size: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    warp_num_per_block: int = 8
    block_num: int = 80
    max_total_recv_tokens: int = 0
    use_external_inp_buf: bool = True
    kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode
    gpu_per_node: int = 8
    rdma_block_num: int = 0
    num_qp_per_pe: int = 1
    quant_type: str = "none"


@dataclass
class EpDispatchRoutingHandle:
    """One dispatch's routing in MORI v1's five tensors (replayable by dispatch and
    combine with routing=). Values are MORI's flat indices (rank *
    max_num_tokens_to_send() + slot or token); a handle dispatch(return_routing=True)
    gave makes them on first read from the epjit routing it holds."""
    disp_dest_tok_id_map: object = None
    inter_node_disp_dest_tok_id_map: object = None
    inter_node_disp_send_map: object = None
    total_recv_token_num: object = None
    disp_tok_id_to_src_tok_id_local: object = None
    cur_rank_num_token: int = 0

    def __getattribute__(self, name):
        if name in _HANDLE_TENSORS and object.__getattribute__(self, "__dict__").get(name) is None:
            maker = self.__dict__.get("_maker")
            if maker is not None:
                self.__dict__[name] = maker(name)
        return object.__getattribute__(self, name)

    def tensors(self):
        return tuple(getattr(self, name) for name in _HANDLE_TENSORS)

    @classmethod
    def from_tensors(cls, tensors, cur_rank_num_token=0):
        return cls(*tensors, cur_rank_num_token=cur_rank_num_token)


_HANDLE_TENSORS = ("disp_dest_tok_id_map", "inter_node_disp_dest_tok_id_map", "inter_node_disp_send_map",
                   "total_recv_token_num", "disp_tok_id_to_src_tok_id_local")


def _is_fp8(dtype):
    return "float8" in str(dtype)


def _is_fp4(dtype):
    return "float4" in str(dtype)


class _Bits(dict):
    def __missing__(self, size):
        torch = _torch()
        self[size] = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
        return self[size]


class EpDispatchCombineOp:
    """MORI's v1 op on epjit's (through the EPv2 layer). Collective construction;
    calls enqueue on torch's current stream."""

    def __init__(self, config):
        comm = shmem._communicator("build an EpDispatchCombineOp")
        self.config = config
        self._kind = EpDispatchCombineKernelType(int(config.kernel_type))
        self._quant = _quant_type(config.quant_type)
        self._check_config(comm)
        self._comm = comm
        self._legs = {}          # dispatch dtype -> the EPv2-layer op that moves it
        self._dispatched = None  # the latest dispatch: dict(op, n, indices, out, weights, total, ...)
        self._pending = None     # "dispatch" or "combine": a split call awaiting its recv half
        self._combine_out = None  # combine_send()'s results, filled by combine_recv()
        self._registered = {}    # dtype -> combine input buffer handed out
        self._slots = None       # convert_dispatch_output()'s (token, k) -> packed row map
        self._weights_rows = None
        self._no_scales = None   # the zero scale rows a call without scales sends
        for name in ("block_num", "warp_num_per_block", "rdma_block_num", "num_qp_per_pe"):
            _log_once(f"v1 {name}", f"mori.ops.EpDispatchCombineConfig.{name}: MORI's launch geometry; epjit's kernels "
                      "run with their measured geometry (results are the same)")
        self._v2_config(config.data_type)  # MORI's and epjit's checks of the config, now (no memory yet)
        self._device = "cuda" if comm._epjit.device in ("cuda", "hip") else "cpu"
        torch = _torch()
        self.local_expert_count = torch.zeros(config.num_experts_per_rank, dtype=torch.int32, device=self._device)

    # -- configuration ---------------------------------------------------------
    def _check_config(self, comm):
        cfg = self.config
        if cfg.rank != comm.rank or cfg.world_size != comm.nranks:
            raise ValueError(f"config rank/world_size {cfg.rank}/{cfg.world_size} do not match mori.shmem's "
                             f"{comm.rank}/{comm.nranks} (expected the group shmem_torch_process_group_init joined); "
                             "fix: build the config from that group's rank and size")
        if self._kind in _INTRANODE_KINDS and self._kind != EpDispatchCombineKernelType.AsyncLL \
                and cfg.world_size > cfg.gpu_per_node:
            raise ValueError(f"kernel_type {self._kind} moves tokens within one node, but world_size "
                             f"{cfg.world_size} > gpu_per_node {cfg.gpu_per_node}; fix: use InterNodeV1 or "
                             "InterNodeV1LL across nodes")
        if self._quant == EpDispatchCombineQuantType.Fp4BlockwiseQuant:
            raise ValueError("quant_type='fp4_blockwise' (FP4 combine) is not served by epjit (MORI runs it on gfx950 "
                             "only); fix: use 'fp8_blockwise' or 'none'")
        for name in ("max_token_type_size", "max_num_inp_token_per_rank", "num_experts_per_rank",
                     "num_experts_per_token", "hidden_dim"):
            if getattr(cfg, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")

    def _internode(self):
        return self.config.world_size > self.config.gpu_per_node

    @staticmethod
    def _dtype_key(dtype):
        return str(dtype).replace("torch.", "")

    def _leg(self, dtype):
        """The EPv2-layer op that dispatches `dtype`, built on its first dispatch
        (collective: every rank dispatches the same dtype). MORI sizes one set of
        buffers by max_token_type_size; epjit's ops are sized by the dtype they
        move, so a program that never dispatches data_type never pays for it."""
        key = self._dtype_key(dtype)
        op = self._legs.get(key)
        if op is None:
            if self._legs:
                _log_once(f"v1 leg {key}", f"mori.ops.EpDispatchCombineOp: a {key} dispatch after "
                          f"{list(self._legs)}; building epjit's op for it (collective; later calls reuse it)")
            op = self._legs[key] = _V2Op(self._v2_config(dtype), self._comm)
        return op

    def _any_leg(self):
        """The latest dispatch's op, else any built, else data_type's (built now)."""
        if self._dispatched is not None:
            return self._dispatched["op"]
        return next(iter(self._legs.values())) if self._legs else self._leg(self.config.data_type)

    def _v2_config(self, dtype):
        torch = _torch()
        cfg = self.config
        if _is_fp8(dtype) or _is_fp4(dtype):
            legs = dict(data_type=dtype, dispatch_data_type=dtype, combine_data_type=torch.bfloat16)
        else:
            legs = dict(data_type=dtype)
        internode = self._internode()
        scales = dict(scale_dim=cfg.scale_dim, scale_type_size=cfg.scale_type_size) if cfg.scale_dim > 0 else {}
        return _v2_config.EpDispatchCombineConfig(
            rank=cfg.rank, world_size=cfg.world_size, hidden_dim=cfg.hidden_dim,
            max_num_inp_token_per_rank=cfg.max_num_inp_token_per_rank,
            num_experts_per_rank=cfg.num_experts_per_rank, num_experts_per_token=cfg.num_experts_per_token,
            quant_type=_EPV2_QUANT[self._quant],
            max_total_recv_tokens=cfg.max_total_recv_tokens,
            gpu_per_node=cfg.gpu_per_node if internode else None,
            internode_kernel=_INTERNODE_KERNEL.get(self._kind, "auto") if internode else "auto",
            **legs, **scales)

    # -- sizes (MORI's EpDispatchCombineConfig methods) ------------------------
    def max_num_tokens_to_send_per_rank(self):
        return self.config.max_num_inp_token_per_rank

    def max_num_tokens_to_send(self):
        return self.config.world_size * self.config.max_num_inp_token_per_rank

    def max_num_tokens_to_recv(self):
        cfg = self.config
        per_rank = cfg.max_num_inp_token_per_rank
        if cfg.max_total_recv_tokens > 0:
            per_rank = min(-(-cfg.max_total_recv_tokens // cfg.world_size), per_rank)
        return cfg.world_size * per_rank

    def max_num_tokens_to_recv_per_rank(self):
        return self.max_num_tokens_to_recv() // self.config.world_size

    def decode_send_flat_idx(self, flat_idx):
        """A flat index (get_dispatch_src_token_pos's) as (rank, token)."""
        stride = self.max_num_tokens_to_send()
        return int(flat_idx) // stride, int(flat_idx) % stride

    def _to_flat(self, origin):
        """epjit's origin (rank * max_tokens + token) as MORI's flat index."""
        m = self.config.max_num_inp_token_per_rank
        return torch_div(origin, m) * self.max_num_tokens_to_send() + origin % m

    def _from_flat(self, flat):
        stride = self.max_num_tokens_to_send()
        return torch_div(flat, stride) * self.config.max_num_inp_token_per_rank + flat % stride

    # -- dispatch --------------------------------------------------------------
    def _check_input(self, input, indices):
        cfg = self.config
        if input.dim() != 2 or input.shape[1] != cfg.hidden_dim:
            raise epjit.Error(f"dispatch input of shape {tuple(input.shape)} (expected [tokens, hidden_dim = "
                              f"{cfg.hidden_dim}]: epjit's kernels move whole rows of the configured width); fix: "
                              "pass [tokens, hidden_dim] rows")
        if input.element_size() > cfg.max_token_type_size:
            raise epjit.Error(f"dispatch input of {input.dtype} ({input.element_size()} bytes per element) exceeds "
                              f"max_token_type_size = {cfg.max_token_type_size}; fix: raise max_token_type_size")
        if indices.dim() != 2 or indices.shape[0] != input.shape[0] or indices.shape[1] != cfg.num_experts_per_token:
            raise epjit.Error(f"indices of shape {tuple(indices.shape)} (expected [{input.shape[0]}, "
                              f"{cfg.num_experts_per_token}] int32); fix: pass the top-k expert ids per token")

    def _check_routing_kind(self, what):
        if self._kind not in _ROUTING_KINDS:
            raise NotImplementedError(f"routing handle path not supported for kernel_type={self._kind}; only "
                                      f"IntraNode and InterNodeV1 expose cache/replay routing {what}.")

    def _check_no_pending(self, call):
        if self._pending is not None:
            raise epjit.Error(f"{call} while a split {self._pending} awaits its {self._pending}_recv() (expected the "
                              f"receive half first); fix: call {self._pending}_recv()")

    def dispatch(self, input, weights, scales, indices, block_num=-1, rdma_block_num=-1, warp_per_block=-1,
                 call_local_expert_count=False, *, routing=None, return_routing=False):
        """(out [max_recv, hidden], out_weights [max_recv, k] f32, out_scales or None,
        out_indices [max_recv, k] int32, total_recv [1] int32[, routing]). Under
        AsyncLL this is the send half, as in MORI: dispatch_recv() completes it."""
        if routing is not None and return_routing:
            raise ValueError("pass either `routing=` (replay) or `return_routing=True` (new layout), not both")
        if routing is not None or return_routing:
            self._check_routing_kind("dispatch")
        self._check_no_pending("dispatch")
        self._check_input(input, indices)
        n = int(input.shape[0])
        if routing is not None:
            replay_n = int(routing.cur_rank_num_token)
            if replay_n <= 0:
                raise ValueError("routing handle has cur_rank_num_token <= 0; use a handle from dispatch(..., "
                                 "return_routing=True) or pass a positive cur_rank_num_token to "
                                 "EpDispatchRoutingHandle.from_tensors(...)")
            if n != replay_n:
                raise ValueError(f"replay dispatch input has {n} tokens but routing.cur_rank_num_token={replay_n}")
        op = self._leg(input.dtype)
        send_only = self._kind == EpDispatchCombineKernelType.AsyncLL
        v2routing = self._v2_routing(op, routing, indices, n) if routing is not None else None
        no_scales = scales is None and self.config.scale_dim > 0
        if no_scales:  # MORI sends none then (and returns none); epjit's op moves a scale row per token
            scales = self._zero_scales(n)
        result = op.dispatch(input, weights, scales, indices, routing=v2routing, return_routing=return_routing,
                             _send_only=send_only)
        out, out_w, out_s, out_idx, total = result[:5]
        if no_scales:
            out_s = None
        handle = self._v1_handle(op, result[5], n) if return_routing else routing
        self._dispatched = dict(op=op, n=n, indices=indices, out=out, weights=out_w, total=total, dtype=input.dtype,
                                handle=handle)
        self._slots = None
        if send_only:
            self._pending = "dispatch"
        elif call_local_expert_count:
            self._count_local_experts(op)
        base = (out, out_w, out_s, out_idx, total)
        return base + (handle,) if return_routing else base

    def _zero_scales(self, n):
        torch = _torch()
        cfg = self.config
        if self._no_scales is None:
            bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[cfg.scale_type_size]
            self._no_scales = torch.zeros(cfg.max_num_inp_token_per_rank, cfg.scale_dim, dtype=bits,
                                          device=self._device)
        return self._no_scales[:n]

    def dispatch_send(self, input, weights, scales, indices, block_num=-1, warp_per_block=-1,
                      call_local_expert_count=False):
        """dispatch() (MORI: so too under every kernel type; only AsyncLL has a
        separate receive half)."""
        return self.dispatch(input, weights, scales, indices, block_num=block_num, warp_per_block=warp_per_block)

    def dispatch_recv(self, block_num=-1, warp_per_block=-1, call_local_expert_count=False):
        """AsyncLL: the receive half of dispatch/dispatch_send; its outputs are then valid."""
        if self._kind != EpDispatchCombineKernelType.AsyncLL:
            raise ValueError(f"dispatch_recv only supports AsyncLL, got kernel_type={int(self._kind)}")
        if self._pending != "dispatch":
            raise epjit.Error("dispatch_recv requires a prior dispatch/dispatch_send call; fix: call dispatch_send "
                              "first")
        op = self._dispatched["op"]
        op._dispatch_recv()
        self._pending = None
        if call_local_expert_count:
            self._count_local_experts(op)

    def _count_local_experts(self, op):
        """MORI's local_expert_count tensor: received (token, k) entries per local
        expert, every k counted; filled on the stream."""
        self.local_expert_count.copy_(op.local_expert_count())

    # -- routing handles ---------------------------------------------------------
    def _v1_handle(self, op, v2handle, n):
        """A v1 handle over the EPv2 layer's; its MORI tensors are made on first read."""
        handle = EpDispatchRoutingHandle(cur_rank_num_token=n)
        handle.__dict__["_v2"] = (op, v2handle)
        handle.__dict__["_maker"] = lambda name: self._handle_tensor(op, v2handle, name)
        return handle

    def _handle_tensor(self, op, v2handle, name):
        torch = _torch()
        cfg = self.config
        device = self._device
        room = cfg.world_size * cfg.max_num_inp_token_per_rank * cfg.num_experts_per_rank
        nodes = max(1, cfg.world_size // cfg.gpu_per_node)
        if name == "total_recv_token_num":
            return v2handle.total_recv_token_num
        if name == "inter_node_disp_dest_tok_id_map":
            return torch.zeros(nodes * cfg.max_num_inp_token_per_rank * cfg.num_experts_per_token,
                               dtype=torch.int32, device=device)
        if name == "inter_node_disp_send_map":
            return torch.zeros(nodes * cfg.max_num_inp_token_per_rank, dtype=torch.int32, device=device)
        flat = torch.full((max(room, op.max_recv, cfg.max_num_inp_token_per_rank * cfg.num_experts_per_token),),
                          -1, dtype=torch.int32, device=device)
        if name == "disp_dest_tok_id_map":
            forward = v2handle.disp_dest_tok_id_map.long()  # rank * max_recv + slot
            mapped = torch_div(forward, op.max_recv) * self.max_num_tokens_to_send() + forward % op.max_recv
            flat[: forward.numel()] = torch.where(forward >= 0, mapped, torch.full_like(mapped, -1)).int()
            return flat
        origins = v2handle.disp_tok_id_to_src_tok_id_local.long()
        flat[: origins.numel()] = torch.where(origins >= 0, self._to_flat(origins), torch.full_like(origins, -1)).int()
        return flat

    def _v2_routing(self, op, handle, indices, n):
        """The EPv2 layer's handle for a v1 one: its own, or one rebuilt from MORI's tensors."""
        kept = handle.__dict__.get("_v2")
        if kept is not None and kept[0] is op:
            return kept[1]
        cfg = self.config
        torch = _torch()
        pairs = cfg.max_num_inp_token_per_rank * cfg.num_experts_per_token
        forward = handle.disp_dest_tok_id_map.reshape(-1)[:pairs].long()
        stride = self.max_num_tokens_to_send()
        v2forward = torch.where(forward >= 0, torch_div(forward, stride) * op.max_recv + forward % stride,
                                torch.full_like(forward, -1)).int()
        origins = handle.disp_tok_id_to_src_tok_id_local.reshape(-1)[: op.max_recv].long()
        v2origins = torch.where(origins >= 0, self._from_flat(origins), torch.full_like(origins, -1)).int()
        rebuilt = _V2Handle.from_tensors((v2forward, handle.inter_node_disp_dest_tok_id_map,
                                          handle.inter_node_disp_send_map, handle.total_recv_token_num, v2origins),
                                         cur_rank_num_token=n)
        return rebuilt

    # -- combine ---------------------------------------------------------------
    def _combine_args(self, input, weights, indices, use_external_inp_buf, routing):
        if self._dispatched is None:
            raise epjit.Error("combine without a dispatch before it; fix: call dispatch() first")
        if routing is not None:
            self._check_routing_kind("combine")
            if routing is not self._dispatched["handle"]:
                raise epjit.Error("combine with a routing other than the latest dispatch's (epjit combines the latest "
                                  "dispatch); fix: combine after each dispatch, with that dispatch's routing")
        cur_n = int(routing.cur_rank_num_token) if routing is not None else self._dispatched["n"]
        if int(indices.size(0)) != cur_n:
            raise ValueError(f"combine() indices has {int(indices.size(0))} rows but this rank dispatched {cur_n} "
                             "tokens. Pass this rank's own [num_tokens, topk] routing -- the tensor given to "
                             "dispatch() -- not dispatch()'s returned out_idx (ROCm/mori#475).")
        external = use_external_inp_buf if use_external_inp_buf >= 0 else int(self.config.use_external_inp_buf)
        if not external and input.data_ptr() not in {b.data_ptr() for b in self._registered.values()}:
            raise epjit.Error("combine with use_external_inp_buf=False reads the registered combine input buffer, but "
                              "`input` is another tensor (MORI would ignore it and read the buffer); fix: write the "
                              "expert outputs into get_registered_combine_input_buffer(dtype) and pass it")
        torch = _torch()
        op = self._dispatched["op"]
        if self._quant == EpDispatchCombineQuantType.Fp8BlockwiseQuant:
            if input.dtype != torch.bfloat16:
                raise ValueError(f"fp8_blockwise combine only supports bf16, got {input.dtype}")
            if not external:
                raise ValueError("fp8_blockwise combine currently requires --zero-copy 0 (useExternalInpBuffer=True). "
                                 "P2P read path not yet implemented.")
        combine_type = torch.float32 if op._op.config_combine_type == "f32" else torch.bfloat16
        widens = input.dtype == combine_type or _is_fp8(input.dtype) or (
            input.dtype == torch.bfloat16 and combine_type == torch.float32)
        if not widens:
            raise epjit.Error(f"combine input of {input.dtype} after a {self._dispatched['dtype']} dispatch, whose "
                              f"combine sums {combine_type} rows (expected a dtype that widens to it exactly); fix: "
                              f"combine {combine_type} or a narrower type")
        return op, self._weights_for(weights, op)

    def _weights_for(self, weights, op):
        """MORI reads combine's weights per received row ([max_recv, k] f32); fewer
        rows are taken as the first rows (the rest sum as 0)."""
        if weights is None or weights.size(0) == 0:
            return None
        torch = _torch()
        rows = op.max_recv
        if (weights.shape[0] == rows and weights.dtype == torch.float32 and weights.is_contiguous()
                and weights.device.type == op._device):
            return weights
        if weights.shape[0] > rows:
            raise epjit.Error(f"combine weights have {weights.shape[0]} rows (expected at most max_recv = {rows}: one "
                              "per received row); fix: pass dispatch's out_weights or rows of it")
        if self._weights_rows is None or self._weights_rows.device.type != op._device:
            self._weights_rows = torch.zeros(rows, self.config.num_experts_per_token, dtype=torch.float32,
                                             device=op._device)
        self._weights_rows.zero_()
        self._weights_rows[: weights.shape[0]].copy_(weights.reshape(weights.shape[0], -1))
        return self._weights_rows

    @staticmethod
    def _as_input_dtype(out, out_w, input, weights):
        if out is not None and out.dtype != input.dtype:
            out = out.to(input.dtype)
        if out_w is not None and weights is not None and out_w.dtype != weights.dtype:
            out_w = out_w.to(weights.dtype)
        return out, out_w

    def combine(self, input, weights, indices, block_num=-1, rdma_block_num=-1, warp_per_block=-1,
                use_external_inp_buf=-1, call_reset=False, *, routing=None):
        """(out [tokens, hidden] in input's dtype, out_weights [tokens, k] or None):
        each token's rows from its destination ranks summed in f32 (in destination
        order, one rounding); weights likewise. `indices` is this rank's own
        dispatch indices. Under AsyncLL this is the send half (combine_recv fills the
        returned tensors)."""
        self._check_no_pending("combine")
        op, travel = self._combine_args(input, weights, indices, use_external_inp_buf, routing)
        if self._kind == EpDispatchCombineKernelType.AsyncLL:
            return self._combine_send_half(op, input, travel, weights)
        out, out_w = op._combine_rows(input, travel)
        result = self._as_input_dtype(out, out_w if travel is not None else None, input, weights)
        if call_reset:
            self.reset()
        return result

    def _combine_send_half(self, op, input, travel, weights):
        torch = _torch()
        n, cfg = self._dispatched["n"], self.config
        out = torch.empty(n, cfg.hidden_dim, dtype=input.dtype, device=op._device)
        out_w = (torch.empty(n, cfg.num_experts_per_token, dtype=weights.dtype, device=op._device)
                 if travel is not None else None)
        op._combine_rows(input, travel, send_only=True)
        self._pending, self._combine_out = "combine", (op, out, out_w)
        return out, out_w

    def combine_send(self, input, weights, indices, block_num=-1, warp_per_block=-1):
        """combine() (MORI: so too under every kernel type)."""
        return self.combine(input, weights, indices, block_num=block_num, warp_per_block=warp_per_block)

    def combine_recv(self, block_num=-1, warp_per_block=-1):
        """AsyncLL: the receive half of combine/combine_send; fills the tensors it returned."""
        if self._kind != EpDispatchCombineKernelType.AsyncLL:
            raise ValueError(f"combine_recv only supports AsyncLL, got kernel_type={int(self._kind)}")
        if self._pending != "combine":
            raise epjit.Error("combine_recv requires a prior combine/combine_send call; fix: call combine_send first")
        op, out, out_w = self._combine_out
        sums, sums_w = op._combine_recv()
        out.copy_(sums[: out.shape[0]])
        if out_w is not None and sums_w is not None:
            out_w.copy_(sums_w[: out_w.shape[0]])
        self._pending, self._combine_out = None, None

    def get_registered_combine_input_buffer(self, dtype, hidden_dim=-1):
        """[max_recv, hidden] rows combine reads without a copy (use_external_inp_buf
        False): the op's own staging rows where dtype is its combine type, else a
        buffer of `dtype` kept by this op (combine widens it into the staging)."""
        if hidden_dim not in (-1, self.config.hidden_dim):
            raise epjit.Error(f"get_registered_combine_input_buffer(hidden_dim={hidden_dim}): epjit's rows are "
                              f"hidden_dim = {self.config.hidden_dim} wide; fix: pass -1 or {self.config.hidden_dim}")
        key = self._dtype_key(dtype)
        if key not in self._registered:
            torch = _torch()
            op = self._any_leg()
            staging = op._staging if op._staging is not None else op._make_staging()
            op._staging = staging
            if staging.dtype == dtype:
                self._registered[key] = staging
            else:
                self._registered[key] = torch.empty(op.max_recv, self.config.hidden_dim, dtype=dtype,
                                                    device=op._device)
        return self._registered[key]

    # -- standard MoE ------------------------------------------------------------
    def _check_std_moe(self, call):
        if self._kind not in _STD_MOE_KINDS:
            raise ValueError(f"{call} only supports IntraNode/InterNodeV1LL")

    def dispatch_standard_moe(self, input, weights, scales, indices, block_num=-1, rdma_block_num=-1,
                              warp_per_block=-1):
        """dispatch, then convert_dispatch_output: (packed_x [experts_per_rank, world *
        max_tokens, hidden], packed_count [experts_per_rank], packed_src_info (flat
        source index per packed row), layout_range (empty int64))."""
        self._check_std_moe("dispatch_standard_moe")
        out, _, _, out_idx, _ = self.dispatch(input, weights, scales, indices)
        return self.convert_dispatch_output(out, out_idx)

    def combine_standard_moe(self, input, weights, indices, block_num=-1, rdma_block_num=-1, warp_per_block=-1,
                             call_reset=False):
        """convert_combine_input of the packed expert outputs, then combine: (out, None)."""
        self._check_std_moe("combine_standard_moe")
        rows = self.convert_combine_input(input, None, None)
        out, _ = self.combine(rows, None, indices, use_external_inp_buf=1, call_reset=call_reset)
        return out, None

    def convert_dispatch_output(self, dispatch_out_x, dispatch_out_topk_idx, block_num=-1, warp_per_block=-1):
        """Each received token once per (k, local expert) entry, packed per expert in
        (received row, k) order; no host synchronization."""
        if self._dispatched is None:
            raise epjit.Error("convert_dispatch_output before any dispatch; fix: call dispatch() first")
        torch = _torch()
        cfg = self.config
        op = self._dispatched["op"]
        epr, k, hidden = cfg.num_experts_per_rank, cfg.num_experts_per_token, dispatch_out_x.shape[1]
        per_expert = self.max_num_tokens_to_send()
        rows = min(dispatch_out_x.shape[0], dispatch_out_topk_idx.shape[0], op.max_recv)
        device = dispatch_out_x.device
        received = torch.arange(rows, device=device)[:, None] < self._dispatched["total"].to(device).long()
        local = dispatch_out_topk_idx[:rows].long() - cfg.rank * epr
        is_local = received & (local >= 0) & (local < epr)
        key = torch.where(is_local, local, torch.full_like(local, epr)).reshape(-1)  # epr: not packed
        order = torch.argsort(key, stable=True)
        counts = torch.bincount(key, minlength=epr + 1)
        starts = torch.cumsum(counts, 0) - counts
        position = torch.empty_like(key)
        position[order] = torch.arange(key.numel(), device=device) - starts[key[order]]
        spare = epr * per_expert
        slot = torch.where(key < epr, key * per_expert + position, torch.full_like(key, spare))
        source_row = torch.full((spare + 1,), 0, dtype=torch.long, device=device)
        source_row.scatter_(0, slot, torch.arange(key.numel(), device=device) // k)
        packed_x = torch.empty(epr, per_expert, hidden, dtype=dispatch_out_x.dtype, device=device)
        bits = _BITS[dispatch_out_x.element_size()]  # moved as raw bits: fp8 has no index_select everywhere
        torch.index_select(dispatch_out_x[:rows].view(bits), 0, source_row[:spare],
                           out=packed_x.view(spare, hidden).view(bits))
        origins = self._to_flat(op._op.received_origins()[:rows, 0].long().to(device))
        src_info = torch.full((spare + 1,), -1, dtype=torch.int32, device=device)
        src_info.scatter_(0, slot, origins.repeat_interleave(k).int())
        self._slots = torch.where(key < epr, slot, torch.full_like(slot, -1)).view(rows, k)
        layout_range = torch.empty(0, dtype=torch.int64, device=device)
        return packed_x, counts[:epr].int(), src_info[:spare].view(epr, per_expert), layout_range

    def convert_combine_input(self, packed_recv_x, packed_recv_src_info, packed_recv_layout_range, block_num=-1,
                              warp_per_block=-1):
        """Per received row, its local experts' packed rows weighted by the dispatched
        weights and summed (f32, in k order, one rounding), into the registered combine
        input buffer, which it returns ([max_recv, hidden])."""
        if self._slots is None:
            raise epjit.Error("convert_combine_input before convert_dispatch_output; fix: convert the dispatch output "
                              "first")
        torch = _torch()
        cfg = self.config
        hidden = packed_recv_x.shape[-1]
        packed = packed_recv_x.reshape(-1, hidden)
        slots = self._slots
        rows, k = slots.shape
        weights = self._dispatched["weights"][:rows].to(packed.device)
        total = torch.zeros(rows, hidden, dtype=torch.float32, device=packed.device)
        for j in range(k):
            use = slots[:, j] >= 0
            weight = torch.where(use, weights[:, j], torch.zeros_like(weights[:, j]))
            total += weight[:, None] * packed[slots[:, j].clamp(min=0)].float()
        out = self.get_registered_combine_input_buffer(packed_recv_x.dtype, hidden_dim=-1)
        out[:rows].copy_(total.to(out.dtype))
        return out

    # -- the rest ------------------------------------------------------------------
    def get_dispatch_src_token_pos(self):
        """[total_recv] int32: each received row's source as MORI's flat index (rank *
        max_num_tokens_to_send() + token). Synchronizes, as MORI's does."""
        if self._dispatched is None:
            raise epjit.Error("get_dispatch_src_token_pos before any dispatch; fix: call dispatch() first")
        op = self._dispatched["op"]
        if op._device == "cuda":
            _torch().cuda.synchronize()
        total = int(self._dispatched["total"].reshape(-1)[0].item())
        return self._to_flat(op._op.received_origins()[:total, 0].long()).int()

    def reset(self):
        """MORI resets its kernels' counters between rounds; epjit's op keeps none
        across calls, so nothing is launched (the same results)."""
        self._check_no_pending("reset")

    def get_launch_config(self, is_dispatch=True, block_num=-1, rdma_block_num=-1, warp_per_block=-1):
        """MORI's launch triple, echoed (epjit's kernels use their own geometry)."""
        return block_num, rdma_block_num, warp_per_block

    @property
    def backend_name(self):
        """"epjit" and the target, e.g. "epjit (sm90)"."""
        return f"epjit ({self._comm._epjit.target or self._device})" if not self._legs else \
            next(iter(self._legs.values())).backend_name

    def close(self):
        """Frees every epjit op this one built (collective). Idempotent."""
        for op in self._legs.values():
            op.close()
        self._registered.clear()


_BITS = _Bits()


def torch_div(a, b):
    return a.div(b, rounding_mode="floor")
