"""mori.ops on epjit: the v2 dispatch/combine op (`dispatch_combine_v2`)."""
from . import dispatch_combine_v2  # noqa: F401
from .dispatch_combine_v2 import (EpDispatchCombineConfig, EpDispatchCombineOp,  # noqa: F401
                                  EpDispatchRoutingHandle)
