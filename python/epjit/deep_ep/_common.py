"""What epjit.deep_ep's modules share: torch, imported when first used (the
package imports without it), top-k ids as the op takes them, and the refusal
of what epjit does not serve."""


_TORCH = None


def _torch():
    global _TORCH
    if _TORCH is None:
        import torch
        _TORCH = torch
    return _TORCH


def _ids(topk_idx):
    """topk_idx as the op takes it: int64 (DeepEP's topk_idx_t; the op narrows it on the
    device) and int32 as they are, other integer types as int64."""
    torch = _torch()
    return topk_idx if topk_idx.dtype in (torch.int64, torch.int32) else topk_idx.long()


def _refuse(what, why, fix):
    raise NotImplementedError(f"epjit.deep_ep: {what} is not served: {why}; fix: {fix}")
