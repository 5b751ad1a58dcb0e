"""mori.ops on epjit: MORI's first (v1) API at the top level (`mori.ops.EpDispatchCombineOp`,
the one vLLM, SGLang and AITER call) and EPv2's in `mori.ops.dispatch_combine_v2`.
Both run epjit's kernels; docs/PYTHON.md lists where each differs from MORI."""
from . import dispatch_combine_v2  # noqa: F401
from .dispatch_combine import (EpDispatchCombineConfig, EpDispatchCombineKernelType,  # noqa: F401
                               EpDispatchCombineOp, EpDispatchCombineQuantType, EpDispatchRoutingHandle)
from .local_expert_count import launch_local_expert_count  # noqa: F401
