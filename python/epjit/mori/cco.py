"""mori.cco on epjit: the communicator MORI's ops are built on.

`Communicator.init(nranks, rank, unique_id)` joins an epjit communicator (TCP
bootstrap, symmetric memory) on the calling process's device: torch's current CUDA
device where torch has one, else host ranks. The unique id is MORI's: made on one
rank, sent to the others as bytes or pickled.
"""
import logging
import weakref

import epjit
from epjit._arrays import _torch_device

_log = logging.getLogger("epjit.mori")
_logged = set()


def _log_once(key, message):
    if key not in _logged:
        _logged.add(key)
        _log.info(message)


class UniqueId:
    """A rendezvous token: get_unique_id() on one rank, then every rank's init().
    bytes(uid) and pickling carry it (MORI's mpi4py / torch.distributed idioms)."""

    def __init__(self, raw=None):
        self._bytes = bytes(raw) if raw is not None else bytes(epjit.Communicator.get_unique_id())

    def __bytes__(self):
        return self._bytes

    def __getstate__(self):
        return self._bytes

    def __setstate__(self, state):
        self._bytes = bytes(state)

    @staticmethod
    def from_bytes(raw):
        return UniqueId(raw)

    def __repr__(self):
        return f"<UniqueId: {self._bytes[:8].hex()}...>"


def get_unique_id():
    """A new rendezvous token (call on one rank, then send it to all)."""
    return UniqueId()


class Communicator:
    """MORI's cco.Communicator: init() is collective; usable as a context manager,
    whose exit destroys it (closing the ops built on it first)."""

    DEFAULT_PER_RANK_VMM = 4 * 1024 * 1024 * 1024
    _EPJIT_KWARGS = ("target", "device", "device_ordinal", "timeout_seconds", "gpu_per_node")

    def __init__(self):
        self._epjit = None
        self._ops = weakref.WeakSet()
        self._rank = None
        self._nranks = None

    get_unique_id = staticmethod(get_unique_id)

    @classmethod
    def init(cls, nranks, rank, unique_id, per_rank_vmm=DEFAULT_PER_RANK_VMM, **kwargs):
        """Collective: joins the communicator. per_rank_vmm (MORI's virtual address
        reservation) is accepted and not needed: epjit sizes each op's arena from its
        config. epjit's own keywords pass through: target, device ("cuda", "hip",
        "host"), device_ordinal, timeout_seconds, gpu_per_node (nodes of consecutive
        ranks, for internode ops on one host); any other keyword is ignored with one
        log line."""
        if per_rank_vmm != cls.DEFAULT_PER_RANK_VMM:
            _log_once("per_rank_vmm", "mori.cco.Communicator.init: per_rank_vmm is not needed on epjit "
                      "(each op's arena is sized from its config); ignored")
        for name in kwargs:
            if name not in cls._EPJIT_KWARGS:
                _log_once(name, f"mori.cco.Communicator.init: keyword {name}={kwargs[name]!r} has no epjit "
                          "counterpart; ignored")
        options = {name: kwargs[name] for name in cls._EPJIT_KWARGS if name in kwargs}
        if "device" not in options and "target" not in options:
            options["device"], ordinal = _torch_device()
            options.setdefault("device_ordinal", ordinal)
        comm = cls()
        comm._epjit = epjit.Communicator.init(nranks, rank, bytes(unique_id), **options)  # a UniqueId or its bytes
        comm._rank, comm._nranks = rank, nranks
        return comm

    @classmethod
    def _adopt(cls, native):
        """A Communicator over an epjit.Communicator already joined (mori.shmem's)."""
        comm = cls()
        comm._epjit, comm._rank, comm._nranks = native, native.rank, native.world_size
        return comm

    def _check_valid(self, what="use"):
        if self._epjit is None:
            raise RuntimeError(f"Cannot {what}: Communicator has been destroyed")

    def _track(self, op):
        self._ops.add(op)

    def _untrack(self, op):
        self._ops.discard(op)

    def destroy(self):
        """Closes every op built on this communicator, then leaves it. Idempotent."""
        for op in list(self._ops):
            try:
                op.close()
            except Exception as error:  # best effort, as MORI's close_all_resources
                _log.warning("closing an op while destroying its communicator: %s", error)
        self._ops = weakref.WeakSet()
        if self._epjit is not None:
            self._epjit.destroy()
            self._epjit = None

    @property
    def is_valid(self):
        return self._epjit is not None

    @property
    def rank(self):
        self._check_valid("get rank")
        return self._rank

    @property
    def nranks(self):
        self._check_valid("get nranks")
        return self._nranks

    world_size = nranks

    def barrier(self):
        self._check_valid("barrier")
        self._epjit.barrier()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __repr__(self):
        if self._epjit is None:
            return "<Communicator: destroyed>"
        return f"<Communicator: rank={self._rank}/{self._nranks} (epjit, {self._epjit.device})>"
