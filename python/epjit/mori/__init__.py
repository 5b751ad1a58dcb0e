"""epjit.mori: MORI EPv2's Python API on epjit's op.

A program written against MORI's `mori.cco` communicator and
`mori.ops.dispatch_combine_v2` op (EPv2), or against MORI's first API (`mori.shmem` and
`mori.ops.EpDispatchCombineOp`, which vLLM, SGLang and AITER call), runs unchanged on epjit (NVIDIA GPUs, AMD GPUs, CPU
ranks) after one call:

    import epjit.mori
    epjit.mori.install()          # registers `mori`, `mori.cco`, `mori.shmem`, `mori.ops`, ... if no real MORI is importable
    from mori.ops.dispatch_combine_v2 import EpDispatchCombineConfig, EpDispatchCombineOp

or by importing the same names from `epjit.mori` directly. Where MORI's behaviour and
epjit's differ, this layer follows MORI; docs/PYTHON.md lists each difference that is
left. Needs torch (MORI's tensors are torch tensors).
"""
import importlib.util
import logging
import sys

from . import cco, ops, shmem  # noqa: F401
from .ops import dispatch_combine, dispatch_combine_v2, local_expert_count  # noqa: F401
from .ops.dispatch_combine_v2 import tuning_configs  # noqa: F401

_log = logging.getLogger("epjit.mori")

_NAMES = {
    "mori": sys.modules[__name__],
    "mori.cco": cco,
    "mori.ops": ops,
    "mori.ops.dispatch_combine": dispatch_combine,
    "mori.ops.local_expert_count": local_expert_count,
    "mori.shmem": shmem,
    "mori.ops.dispatch_combine_v2": dispatch_combine_v2,
    "mori.ops.dispatch_combine_v2.tuning_configs": tuning_configs,
}


def install():
    """Makes `import mori...` resolve to this package, unless a real MORI is
    importable (then nothing changes: it is the one the program asked for).
    Returns True when the names are (now) this package's."""
    present = sys.modules.get("mori")
    if present is _NAMES["mori"]:
        return True
    if present is not None or importlib.util.find_spec("mori") is not None:
        _log.info("epjit.mori.install(): a real MORI is importable; `mori` stays MORI")
        return False
    sys.modules.update(_NAMES)
    _log.info("epjit.mori.install(): `mori` now names epjit.mori (kernel_backend epjit)")
    return True
