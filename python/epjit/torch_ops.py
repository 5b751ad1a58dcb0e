"""The op's calls as torch custom ops (torch.library), for code that
torch.compile traces:

    from epjit import torch_ops
    recv, recv_w, recv_scales, recv_idx, total = torch_ops.dispatch(op, x, w, None, idx)
    out = torch_ops.combine(op, expert_out, num_tokens=x.shape[0])

Copy semantics: each call returns new tensors, copies of the op's output
buffers made on the call's stream, so an output kept across the op's next call
keeps its values, compiled or not (the plain methods return the buffers
themselves, which the next call rewrites). A copy costs a device-memory pass
over the output (the whole buffer: its shape is fixed by the op's capacity).

Each op is registered once per process under a number (the custom ops take
tensors and numbers only) with a one-element `order` tensor, which every
call declares it mutates: the compiler keeps the calls of one op in program
order and never drops one whose outputs go unread. Graph breaks: none (tests
check torch._dynamo.explain); mode="reduce-overhead" captures the calls in
CUDA graphs as torch.cuda.graph does. docs/PYTHON.md "torch.compile".
"""
import itertools
import weakref

import torch

from . import Error

_ops = weakref.WeakValueDictionary()  # number -> EpDispatchCombineOp
_numbers = itertools.count(1)


def _bind(op):
    """(number, order tensor) of `op`, made on its first use here."""
    bound = op.__dict__.get("_torch_ops")
    if bound is None:
        number = next(_numbers)
        device = "cpu" if op.target == "host" or op.target.startswith("host-") else "cuda"
        order = torch.zeros(1, dtype=torch.int32, device=device if device == "cpu" else torch.cuda.current_device())
        _ops[number] = op
        bound = op._torch_ops = (number, order)
    return bound


def _op(number):
    op = _ops.get(number)
    if op is None:
        raise Error(f"epjit torch op {number}: its EpDispatchCombineOp is gone (expected an op alive for as long as "
                    "compiled code calls it); fix: keep a reference to the op")
    return op


def _shapes(op):
    """What the fake implementations return: the op's fixed output shapes."""
    c = op._config
    capacity, hidden, topk = op.capacity, c.hidden_dim, c.num_experts_per_token
    epr, rows = c.num_experts_per_rank, c.world_size * c.max_num_inp_token_per_rank
    return capacity, hidden, topk, epr, rows


_TORCH_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "fp8_ocp": torch.float8_e4m3fn,
                 "fp8_fnuz": torch.float8_e4m3fnuz, "fp4": torch.float4_e2m1fn_x2 if hasattr(torch, "float4_e2m1fn_x2")
                 else torch.uint8}


def _leg_dtype(leg_type, default):
    return _TORCH_DTYPES.get(str(leg_type), default)


def _check_rows(call, out, num_tokens):
    """A combine's output rows are the answered dispatch's: num_tokens must say so."""
    if out.shape[0] != num_tokens:
        raise Error(f"epjit torch {call}: num_tokens={num_tokens}, but the last dispatch had {out.shape[0]} rows "
                    "(expected the dispatch's row count, x.shape[0] of its input); fix: pass num_tokens=x.shape[0]")


@torch.library.custom_op("epjit::dispatch", mutates_args=("order",))
def _dispatch(order: torch.Tensor, number: int, x: torch.Tensor, weights: torch.Tensor,
              scales: torch.Tensor | None, indices: torch.Tensor,
              token_count: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                         torch.Tensor]:
    op = _op(number)
    recv, recv_w, recv_scales, recv_idx, total = op.dispatch(x, weights, scales, indices, token_count=token_count)
    if recv_scales is None:
        recv_scales = torch.empty(0, dtype=torch.uint8, device=x.device)
    return recv.clone(), recv_w.clone(), recv_scales.clone(), recv_idx.clone(), total.clone()


@_dispatch.register_fake
def _(order, number, x, weights, scales, indices, token_count):
    op = _op(number)
    capacity, hidden, topk, _, _ = _shapes(op)
    scale_bytes = op._config.scale_dim * op._config.scale_type_size if scales is not None else 0
    return (x.new_empty(capacity, hidden, dtype=_leg_dtype(op._dispatch_type, x.dtype)),
            x.new_empty(capacity, topk, dtype=torch.float32),
            x.new_empty(capacity if scale_bytes else 0, *((scale_bytes,) if scale_bytes else ()), dtype=torch.uint8),
            x.new_empty(capacity, topk, dtype=torch.int32),
            x.new_empty(1, dtype=torch.int32))


@torch.library.custom_op("epjit::combine", mutates_args=("order",))
def _combine(order: torch.Tensor, number: int, x: torch.Tensor, weights: torch.Tensor | None,
             num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    op = _op(number)
    out, out_w = op.combine(x, weights)
    _check_rows("combine", out, num_tokens)
    if out_w is None:
        out_w = torch.empty(0, dtype=torch.float32, device=x.device)
    return out.clone(), out_w.clone()


@_combine.register_fake
def _(order, number, x, weights, num_tokens):
    op = _op(number)
    _, hidden, topk, _, _ = _shapes(op)
    dtype = _leg_dtype(op._combine_type, x.dtype)
    return (x.new_empty(num_tokens, hidden, dtype=dtype),
            x.new_empty(num_tokens if weights is not None else 0, *((topk,) if weights is not None else ()),
                        dtype=torch.float32))


@torch.library.custom_op("epjit::std_moe_pack", mutates_args=("order",))
def _std_moe_pack(order: torch.Tensor, number: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    tokens, counts, sources = _op(number).std_moe_pack()
    return tokens.clone(), counts.clone(), sources.clone()


@_std_moe_pack.register_fake
def _(order, number):
    _, hidden, _, epr, rows = _shapes(_op(number))
    return (order.new_empty(epr, rows, hidden, dtype=torch.bfloat16), order.new_empty(epr, dtype=torch.int32),
            order.new_empty(epr, rows, dtype=torch.int32))


@torch.library.custom_op("epjit::std_moe_combine", mutates_args=("order",))
def _std_moe_combine(order: torch.Tensor, number: int, expert_out: torch.Tensor,
                     num_tokens: int) -> torch.Tensor:
    out, _ = _op(number).std_moe_combine(expert_out)
    _check_rows("std_moe_combine", out, num_tokens)
    return out.clone()


@_std_moe_combine.register_fake
def _(order, number, expert_out, num_tokens):
    op = _op(number)
    _, hidden, _, _, _ = _shapes(op)
    return expert_out.new_empty(num_tokens, hidden, dtype=_leg_dtype(op._combine_type, torch.bfloat16))


def dispatch(op, x, weights, scales, indices, token_count=None):
    """op.dispatch(x, weights, scales, indices) as a custom op, on new tensors:
    (tokens [capacity, hidden], weights [capacity, k], scales ([capacity,
    scale bytes] uint8, or [0] without scales), indices [capacity, k], total [1])."""
    number, order = _bind(op)
    return torch.ops.epjit.dispatch(order, number, x, weights, scales, indices, token_count)


def combine(op, x, weights=None, *, num_tokens):
    """op.combine(x, weights) as a custom op: (out [num_tokens, hidden], out
    weights [num_tokens, k], or [0] without weights). num_tokens: the rows the
    answered dispatch passed (its input's x.shape[0])."""
    number, order = _bind(op)
    return torch.ops.epjit.combine(order, number, x, weights, num_tokens)


def std_moe_pack(op):
    """op.std_moe_pack() as a custom op, on new tensors (tokens, counts, sources)."""
    number, order = _bind(op)
    return torch.ops.epjit.std_moe_pack(order, number)


def std_moe_combine(op, expert_out, *, num_tokens):
    """op.std_moe_combine(expert_out)'s out as a custom op ([num_tokens, hidden])."""
    number, order = _bind(op)
    return torch.ops.epjit.std_moe_combine(order, number, expert_out, num_tokens)
