"""mori.ops.dispatch_combine_v2 on epjit: MORI EPv2's config, op and routing handle."""
from . import tuning_configs  # noqa: F401
from .config import EpDispatchCombineConfig  # noqa: F401
from .dispatch_combine_op import EpDispatchCombineOp, EpDispatchRoutingHandle  # noqa: F401

__all__ = ["EpDispatchCombineConfig", "EpDispatchCombineOp", "EpDispatchRoutingHandle", "tuning_configs"]
