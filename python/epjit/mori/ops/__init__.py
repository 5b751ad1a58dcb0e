"""mori.ops on epjit: MORI EPv2's op, `mori.ops.dispatch_combine_v2`.

MORI's top-level names (`mori.ops.EpDispatchCombineOp`, `EpDispatchCombineConfig`,
`EpDispatchCombineKernelType`, ...) are its first (v1) API, which vLLM, SGLang and
AITER call. Its semantics differ from EPv2's (the dtype comes from each call's
input, kernel types, `dispatch_send`/`dispatch_recv`, ...), and epjit does not
implement it yet: importing one of those names raises ImportError saying so, as
an absent MORI would, instead of handing a v1 caller EPv2's classes.
"""
from . import dispatch_combine_v2  # noqa: F401

_V1_NAMES = frozenset({
    "EpDispatchCombineOp", "EpDispatchCombineConfig", "EpDispatchCombineKernelType",
    "EpDispatchCombineQuantType", "EpDispatchRoutingHandle", "launch_local_expert_count", "dispatch_combine",
})


def __getattr__(name):
    if name in _V1_NAMES:
        raise ImportError(
            f"mori.ops.{name} is MORI's v1 dispatch/combine API, which epjit does not implement yet "
            "(expected: MORI EPv2 through mori.ops.dispatch_combine_v2, which epjit serves; fix: use "
            "mori.ops.dispatch_combine_v2, or install MORI itself for the v1 API)", name=name)
    raise AttributeError(f"module 'mori.ops' has no attribute '{name}'")
