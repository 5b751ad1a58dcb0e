"""mori.shmem on epjit: the process-wide communicator MORI's v1 ops are built on.

MORI's v1 API sets up once per process, over a torch.distributed group registered
under a name, and every later `mori.ops.EpDispatchCombineOp(config)` uses it:

    torch._C._distributed_c10d._register_process_group("mori", cpu_group)
    mori.shmem.shmem_torch_process_group_init("mori")

Here that joins an epjit communicator over the group (Communicator.from_process_group:
rank and world size are the group's, the unique id travels over it) on the calling
process's device: torch's current CUDA/HIP device where torch has one, else host
ranks. There is no symmetric heap to allocate from by hand: each op sizes its own
window from its config, so MORI's shmem_malloc family is not served (it raises).
"""
import logging

import epjit
from epjit._arrays import _torch_device

from . import cco

_log = logging.getLogger("epjit.mori")
_state = {"comm": None}

MORI_SHMEM_INIT_WITH_UNIQUEID = 1  # MORI's flag for shmem_init_attr


def _resolve_group(group_name):
    import torch.distributed as dist
    for resolve in (getattr(dist.distributed_c10d, "_resolve_process_group", None),
                    getattr(__import__("torch")._C._distributed_c10d, "_resolve_process_group", None)):
        if resolve is None:
            continue
        try:
            return resolve(group_name)
        except (RuntimeError, ValueError, KeyError):
            break
    raise RuntimeError(f"shmem_torch_process_group_init({group_name!r}): no torch process group is registered "
                       "under that name (expected one registered with torch._C._distributed_c10d."
                       "_register_process_group, or a group's group_name); fix: register the group first")


def shmem_torch_process_group_init(group_name, **epjit_options):
    """Collective over the named group: joins the process's communicator. Returns 0,
    as MORI does. epjit's own keywords pass through (device, device_ordinal, target,
    timeout_seconds, gpu_per_node: nodes of that many consecutive ranks, as for
    internode ops on one host); MORI's call has none. Calling it again while a
    communicator is up raises: MORI's shmem is initialized once per process."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise RuntimeError("PyTorch not installed. Use mori.cco.Communicator.init with a unique id instead.") from None
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed not initialized. Call torch.distributed.init_process_group() first "
                           "(expected an initialized default group; fix: init it, then call this)")
    if _state["comm"] is not None and _state["comm"].is_valid:
        raise RuntimeError("shmem_torch_process_group_init: this process's communicator is already up (MORI's shmem "
                           "is initialized once per process); fix: call shmem_finalize() first")
    group = _resolve_group(group_name)
    options = dict(epjit_options)
    if "device" not in options and "target" not in options:
        options["device"], ordinal = _torch_device()
        options.setdefault("device_ordinal", ordinal)
    native = epjit.Communicator.from_process_group(group, **options)
    _state["comm"] = cco.Communicator._adopt(native)
    _log.info("mori.shmem: rank %d of %d joined over process group %r (%s)", native.rank, native.world_size,
              group_name, native.device)
    return 0


def _communicator(what):
    comm = _state["comm"]
    if comm is None or not comm.is_valid:
        raise RuntimeError(f"Cannot {what}: mori.shmem is not initialized (expected "
                           "mori.shmem.shmem_torch_process_group_init(group_name) to have run on every rank); "
                           "fix: register a torch process group and call it first")
    return comm


def shmem_finalize():
    """Closes every op built on the communicator, then leaves it. Returns 0."""
    comm = _state["comm"]
    if comm is not None:
        comm.destroy()
    _state["comm"] = None
    return 0


def shmem_mype():
    return _communicator("get my PE").rank


def shmem_npes():
    return _communicator("get the PE count").nranks


def shmem_barrier_all():
    """Host barrier of every rank (MORI's is a global barrier too)."""
    _communicator("barrier").barrier()
    return 0


def _not_served(name):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"mori.shmem.{name} is not served by epjit (expected: MORI's symmetric heap, which epjit "
                           "does not expose: each epjit op sizes and owns its window); fix: use the op's buffers "
                           "(get_registered_combine_input_buffer) or install MORI for raw shmem use")
    refuse.__name__ = name
    return refuse


def shmem_get_unique_id():
    """A rendezvous token (bytes): make it on one rank, send it to the others."""
    return bytes(cco.get_unique_id())


def shmem_init_attr(flags, rank, nranks, unique_id, **epjit_options):
    """Collective: joins the process's communicator from a unique id (MORI's
    torch-free set-up). flags must be MORI_SHMEM_INIT_WITH_UNIQUEID. Returns 0."""
    if flags != MORI_SHMEM_INIT_WITH_UNIQUEID:
        raise RuntimeError(f"shmem_init_attr: flags {flags} (expected MORI_SHMEM_INIT_WITH_UNIQUEID = "
                           f"{MORI_SHMEM_INIT_WITH_UNIQUEID}, the one set-up epjit serves)")
    if _state["comm"] is not None and _state["comm"].is_valid:
        raise RuntimeError("shmem_init_attr: this process's communicator is already up; fix: shmem_finalize() first")
    _state["comm"] = cco.Communicator.init(nranks, rank, unique_id, **epjit_options)
    return 0


for _name in ("shmem_malloc", "shmem_malloc_align", "shmem_ext_malloc_with_flags", "shmem_free",
              "shmem_mpi_init", "shmem_module_init", "shmem_barrier_on_stream"):
    globals()[_name] = _not_served(_name)
del _name
