"""DeepEP's API (`deep_ep`) on epjit: Buffer's normal mode (get_dispatch_layout,
dispatch with its handle and cached dispatch, combine; on one node or across nodes)
and its low-latency calls in bf16 and fp8 (low_latency_dispatch/combine with hooks
and zero copy, on one node), Config, EventOverlap, EventHandle and deep_ep.utils,
served by epjit's ops on every vendor and on host ranks. `epjit.deep_ep.install()`
makes a program's `import deep_ep` get it. Not yet served, each refused with the
reason: the low-latency calls across nodes, LogFMT, rank masks (docs/PYTHON.md
"DeepEP")."""
import importlib.util
import logging
import sys

from .buffer import Buffer  # noqa: F401
from .config import Config  # noqa: F401
from .utils import EventHandle, EventOverlap  # noqa: F401
from . import utils  # noqa: F401

try:
    import torch as _torch
    topk_idx_t = _torch.int64  # DeepEP's default index type
except ImportError:  # pragma: no cover - the layer needs torch
    topk_idx_t = None

__version__ = "epjit"
_log = logging.getLogger("epjit.deep_ep")


def install():
    """Makes `import deep_ep` (and deep_ep.utils, deep_ep.buffers) resolve to this
    package, unless a real DeepEP is importable (it stays the one asked for).
    Returns True when the names are (now) this package's."""
    this = sys.modules[__name__]
    present = sys.modules.get("deep_ep")
    if present is this:
        return True
    if present is not None or importlib.util.find_spec("deep_ep") is not None:
        _log.info("epjit.deep_ep.install(): a real DeepEP is importable; `deep_ep` stays DeepEP")
        return False
    sys.modules.update({"deep_ep": this, "deep_ep.utils": utils, "deep_ep.utils.event": utils.event,
                        "deep_ep.buffers": sys.modules[__name__ + ".buffer"],
                        "deep_ep.buffers.legacy": sys.modules[__name__ + ".buffer"]})
    _log.info("epjit.deep_ep.install(): `deep_ep` now names epjit.deep_ep")
    return True
