"""MORI EPv2's EpDispatchCombineConfig: the same fields, defaults, validation and
derived properties, plus kernel_backend "epjit"."""
import functools
import os
from dataclasses import dataclass, field
from typing import Optional

from ...cco import _log_once

_QUANT_TYPES = ("none", "fp8_direct_cast", "fp8_blockwise")
_COMBINE_MODES = ("gather", "scatter")
_INTERNODE_KERNELS = ("auto", "v2", "v2_ll")
# MORI's backends run MORI's kernels; here every one of them runs epjit's, with
# the same results, so naming one is accepted (and said once in the log).
_MORI_BACKENDS = ("hip", "flydsl", "hybrid", "default")


def _default_data_type():
    """MORI's default, torch.bfloat16 (the name "bf16" where torch is absent)."""
    try:
        import torch
    except ImportError:
        return "bf16"
    return torch.bfloat16


@functools.lru_cache(maxsize=None)
def _element_bytes():
    """Bytes per element by every name of a payload type, from epjit's element
    table (ep::element_types): fp4 answers 0.5. float16, which MORI sizes its
    buffers for and epjit moves none of, is 2."""
    import epjit

    bits = {row["payload"]: row["bits"] for row in epjit._ELEMENT_TYPES if row["payload"] is not None}
    sizes = {name: bits[payload] // 8 if bits[payload] % 8 == 0 else bits[payload] / 8
             for name, payload in epjit._DTYPE_NAMES.items() if not name.startswith("torch.")}
    sizes["float16"] = 2
    return sizes


def _dtype_bytes(dtype):
    """Bytes per element of a token dtype (torch dtype or name); fp4 counts as one
    byte per two elements, so it answers 0.5."""
    name = str(dtype).replace("torch.", "")
    sizes = _element_bytes()
    if name not in sizes:
        raise ValueError(f"data type {dtype!r} is not one MORI's op moves (bf16, f32, fp8 or fp4)")
    return sizes[name]


def _is_fp8(dtype):
    return "float8" in str(dtype) or str(dtype) == "fp8"


@dataclass
class EpDispatchCombineConfig:
    rank: int
    world_size: int
    hidden_dim: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    data_type: object = field(default_factory=_default_data_type)
    dispatch_data_type: object = None
    combine_data_type: object = None
    # Per-token scales forwarded verbatim with the token (0: none).
    scale_dim: int = 0
    scale_type_size: int = 0
    combine_mode: str = "gather"
    quant_type: str = "none"
    # Geometry: None = from epjit's measured table for the target.
    dispatch_block_num: Optional[int] = None
    combine_block_num: Optional[int] = None
    warp_num_per_block: Optional[int] = None
    combine_warp_num_per_block: Optional[int] = None
    # [(max_tokens_inclusive or None, disp_blocks, disp_warps, comb_blocks, comb_warps), ...]
    schedule: Optional[list] = None
    enable_std_moe: bool = False
    max_total_recv_tokens: int = 0
    kernel_backend: Optional[str] = None
    gpu_per_node: Optional[int] = None
    internode_kernel: str = "auto"
    internode_auto_ll_max_tokens: int = 512

    def __post_init__(self):
        if self.quant_type not in _QUANT_TYPES:
            raise ValueError(f"quant_type must be one of {_QUANT_TYPES}, got {self.quant_type!r}")
        if self.combine_mode not in _COMBINE_MODES:
            raise ValueError(f"combine_mode must be gather|scatter, got {self.combine_mode!r}")
        if self.internode_kernel not in _INTERNODE_KERNELS:
            raise ValueError(f"internode_kernel must be one of {_INTERNODE_KERNELS}, got {self.internode_kernel!r}")
        if (self.dispatch_data_type is None) != (self.combine_data_type is None):
            raise ValueError("dispatch_data_type and combine_data_type must be set together (or neither)")
        if self.quant_type != "none":
            self.combine_mode = "scatter"  # MORI: quant is a scatter-combine transport
        for name in ("scale_dim", "scale_type_size", "max_total_recv_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if (self.scale_dim == 0) != (self.scale_type_size == 0):
            raise ValueError("scale_dim and scale_type_size must both be positive, or both 0")
        backend = self.kernel_backend or os.environ.get("MORI_V2_KERNEL_BACKEND") or "epjit"
        if backend != "epjit":
            if backend not in _MORI_BACKENDS:
                raise ValueError(f"kernel_backend {backend!r} is not known (expected 'epjit', or one of MORI's "
                                 f"{_MORI_BACKENDS}, which epjit's kernels stand in for)")
            _log_once(f"kernel_backend {backend}",
                      f"kernel_backend {backend!r}: epjit's kernels run in its place (the same results)")
        self.kernel_backend = "epjit"
        _dtype_bytes(self.data_type)

    # Which leg moves what.
    @property
    def dispatch_dtype(self):
        return self.dispatch_data_type if self.dispatch_data_type is not None else self.data_type

    @property
    def combine_dtype(self):
        return self.combine_data_type if self.combine_data_type is not None else self.data_type

    @property
    def is_fp8(self):
        return _is_fp8(self.dispatch_dtype)

    @property
    def is_scatter(self):
        return self.combine_mode == "scatter"

    @property
    def fp8_direct_cast(self):
        return self.quant_type == "fp8_direct_cast"

    @property
    def fp8_blockwise(self):
        return self.quant_type == "fp8_blockwise"

    @property
    def combine_scale_dim(self):
        """Blocks of 128 per token under fp8_blockwise combine, else 0."""
        return (self.hidden_dim + 127) // 128 if self.fp8_blockwise else 0

    @property
    def elem_size(self):
        return _dtype_bytes(self.dispatch_dtype)

    @property
    def wire_elem_size(self):
        """Bytes per element on the combine wire: 1 under fp8 quant."""
        return 1 if self.quant_type != "none" else _dtype_bytes(self.combine_dtype)

    @property
    def token_nbytes(self):
        """Bytes of one dispatched token row."""
        return int(self.hidden_dim * self.elem_size)

    @property
    def max_recv(self):
        return self.world_size * self.max_num_inp_token_per_rank

    @property
    def effective_max_recv_per_rank(self):
        if self.max_total_recv_tokens <= 0:
            return self.max_num_inp_token_per_rank
        per = (self.max_total_recv_tokens + self.world_size - 1) // self.world_size
        return min(per, self.max_num_inp_token_per_rank)

    @property
    def effective_max_recv(self):
        """Receive slots per rank (MORI's MaxNumTokensToRecv)."""
        return self.world_size * self.effective_max_recv_per_rank

    @classmethod
    def tuned(cls, **kwargs):
        """A config whose geometry comes from tuning_configs.lookup unless given."""
        from .tuning_configs import lookup
        found = lookup(kwargs["world_size"], kwargs["hidden_dim"], kwargs["num_experts_per_token"],
                       dtype=kwargs.get("data_type"))
        for key, value in found.items():
            kwargs.setdefault(key, value)
        return cls(**kwargs)
