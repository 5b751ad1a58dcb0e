"""deep_ep.utils on epjit: what callers import from it (Megatron-LM's
fused_a2a imports EventHandle and EventOverlap)."""
from .event import EventHandle, EventOverlap  # noqa: F401
