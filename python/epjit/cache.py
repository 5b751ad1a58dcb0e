"""The kernel cache the Python ops share (EPJIT_CACHE_DIR, docs/ENVIRONMENT.md)."""
import json

from . import _epjit


def stats():
    """Counters of this process's cache: memory_hits, disk_hits, misses, compiles, ..."""
    return dict(_epjit.cache_stats())


def directory():
    return _epjit.cache_dir()


def warm(manifest):
    """Builds every kernel of an epjit-warm manifest (a path or a dict) into the
    cache; returns their keys."""
    if not isinstance(manifest, dict):
        with open(manifest) as f:
            manifest = json.load(f)
    keys = []
    for kernel in manifest["kernels"]:
        params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in kernel.get("params", {}).items()}
        for target in kernel.get("targets", manifest.get("targets", [])):
            keys.append(_epjit.cache_get(kernel["template"], params, target))
    return keys


def warm_op(config):
    """Builds the kernels an EpDispatchCombineOp of `config` (target set) uses, as
    a fleet's cache warmer would; returns the key."""
    return _epjit.warm_op(config._native)
