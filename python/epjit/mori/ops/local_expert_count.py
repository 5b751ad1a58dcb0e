"""MORI's launch_local_expert_count on epjit: counts, per local expert, the received
(token, k) entries that name it, from raw pointers as MORI's kernel takes them.

MORI launches a kernel that reads the received-token count on the device; this
reads it on the host first (one synchronization of `stream`) so that it never
reads past the indices the dispatch wrote, then counts with torch on that stream.
"""
import ctypes

import epjit


def _torch():
    import torch
    return torch


def _tensor_at(pointer, count, device):
    """An int32 tensor of `count` elements at `pointer` (no copy): device memory
    through __cuda_array_interface__, host memory through ctypes."""
    torch = _torch()
    if device == "cuda":
        class _Memory:
            __cuda_array_interface__ = {"shape": (count,), "typestr": "<i4", "data": (int(pointer), False),
                                        "version": 3, "strides": None}
        return torch.as_tensor(_Memory(), device="cuda")
    if count == 0:
        return torch.empty(0, dtype=torch.int32)
    return torch.frombuffer((ctypes.c_int32 * count).from_address(int(pointer)), dtype=torch.int32)


def launch_local_expert_count(config, indices_ptr, total_recv_token_num_ptr, local_expert_count_ptr,
                              block_num=-1, warp_per_block=-1, stream=0):
    """Fills local_expert_count_ptr ([num_experts_per_rank] int32) with, per local
    expert, the received entries naming it (every k counted); `indices_ptr` holds
    [total_recv, num_experts_per_token] int32, `total_recv_token_num_ptr` one int32.
    `config` is any object with rank, num_experts_per_rank and num_experts_per_token
    (MORI's config). block_num and warp_per_block are MORI's launch geometry."""
    torch = _torch()
    for name in ("rank", "num_experts_per_rank", "num_experts_per_token"):
        if not hasattr(config, name):
            raise epjit.Error(f"launch_local_expert_count: config has no {name} (expected MORI's "
                              "EpDispatchCombineConfig); fix: pass the op's config")
    if not indices_ptr or not total_recv_token_num_ptr or not local_expert_count_ptr:
        raise epjit.Error("launch_local_expert_count: a null pointer (expected the received indices, the received "
                          "count and the output); fix: pass dispatch's out_indices and total_recv data_ptr()s")
    device = _device()
    epr, k = config.num_experts_per_rank, config.num_experts_per_token
    context = torch.cuda.stream(torch.cuda.ExternalStream(stream)) if device == "cuda" and stream else _NoContext()
    with context:
        if device == "cuda":
            torch.cuda.current_stream().synchronize()
        total = int(_tensor_at(total_recv_token_num_ptr, 1, device)[0].item())
        if total < 0:
            raise epjit.Error(f"launch_local_expert_count: received count {total} (expected >= 0)")
        indices = _tensor_at(indices_ptr, total * k, device).long()
        local = indices - config.rank * epr
        local = local[(local >= 0) & (local < epr)] if device == "cpu" else torch.where(
            (local >= 0) & (local < epr), local, torch.full_like(local, epr))
        counts = torch.bincount(local, minlength=epr + 1)[:epr].int()
        _tensor_at(local_expert_count_ptr, epr, device).copy_(counts)


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _device():
    """Where the process's ranks keep their tensors: mori.shmem's communicator's
    device (host ranks: CPU), else torch's CUDA device when there is one."""
    from .. import shmem
    comm = shmem._state["comm"]
    if comm is not None and comm.is_valid:
        return "cuda" if comm._epjit.device in ("cuda", "hip") else "cpu"
    return "cuda" if _torch().cuda.is_available() else "cpu"
