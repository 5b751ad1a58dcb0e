"""epjit: expert-parallel dispatch/combine with JIT-generated kernels.

MORI EPv2's API (mori.ops.dispatch_combine_v2) over DLPack tensors:

    import epjit
    uid = epjit.Communicator.get_unique_id()          # on one rank; send the bytes to all
    comm = epjit.Communicator.init(world_size, rank, uid)
    config = epjit.EpDispatchCombineConfig(rank=rank, world_size=world_size, hidden_dim=7168,
                                           max_num_inp_token_per_rank=128, num_experts_per_rank=64,
                                           num_experts_per_token=8, data_type="bf16")
    with epjit.EpDispatchCombineOp(config, comm) as op:
        tokens, weights, scales, indices, total_recv = op.dispatch(x, w, None, idx)
        out, out_weights = op.combine(expert_out, weights)

Tensors are numpy arrays or torch tensors (anything with __dlpack__), C-contiguous, on
the op's device. bf16 from numpy: ml_dtypes.bfloat16 or uint16 bits; fp8: the target's
flavor (ml_dtypes / torch float8_e4m3fn, or float8_e4m3fnuz on gfx942) or uint8 bits.
Outputs are views of the op's memory in the input's framework, with the payload's dtype
(fp8 dispatch returns the target's fp8 type).
"""
import os
import weakref

_library = os.path.join(os.path.dirname(__file__), "lib", "libepjit_kernel_source.so")
if os.path.exists(_library):  # the compiler provider installed with the wheel
    os.environ.setdefault("EPJIT_KERNEL_SOURCE_LIBRARY", _library)

from . import _epjit  # noqa: E402
from ._epjit import Error, git_revision, __version__  # noqa: E402,F401
from . import cache  # noqa: E402,F401

from ._arrays import (_np, _ELEMENT_TYPES, _DTYPE_NAMES, _NUMPY_FP8, _dtype_name,  # noqa: E402,F401
                      _current_stream_handle, _is_torch, _target_fp8, _to_native)


def targets():
    """TargetInfo's table: one dict per target (name, vendor, arch, wave_size, numerics_of)."""
    return [dict(row, wave_size=int(row["wave_size"])) for row in _epjit.targets()]


_DEVICE_OF_VENDOR = {"amd": "hip", "nvidia": "cuda", "cpu": "host"}


def device_for_target(target):
    """The device kind that runs `target`: "hip" (AMD), "cuda" (NVIDIA) or "host"."""
    for row in _epjit.targets():
        if row["name"] == target:
            return _DEVICE_OF_VENDOR[row["vendor"]]
    names = ", ".join(row["name"] for row in _epjit.targets())
    raise Error(f"target '{target}' is not known (expected one of {names}); fix: pass one of those")


class Communicator:
    """A rank of an epjit communicator (TCP bootstrap, symmetric memory)."""

    get_unique_id = staticmethod(_epjit.Communicator.get_unique_id)

    def __init__(self, native, target):
        self._native = native
        self.target = target
        self._ops = weakref.WeakSet()  # closed before the communicator goes

    @staticmethod
    def init(world_size, rank, unique_id, target=None, device=None, device_ordinal=-1, timeout_seconds=0.0,
             gpu_per_node=None):
        """Joins the communicator; returns when all ranks have. `target` is the ops'
        default target (epjit.targets() lists them: host, host-gfx942, gfx942, sm90, ...);
        `device` ("host", "cuda" or "hip") defaults to the one that runs the target:
        hip for AMD targets, cuda for NVIDIA ones, host for host targets and when no
        target is given. `gpu_per_node` groups consecutive ranks into nodes (None: by
        hostname); an op whose config has the same gpu_per_node < world_size runs the
        internode path between them."""
        if device is None:
            device = device_for_target(target) if target else "host"
        native = _epjit.Communicator.init(world_size, rank, bytes(unique_id), device, device_ordinal, timeout_seconds,
                                          gpu_per_node)
        return Communicator(native, target)

    @staticmethod
    def from_process_group(group=None, target=None, device=None, device_ordinal=-1, timeout_seconds=0.0,
                           gpu_per_node=None):
        """Joins the ranks of a torch.distributed process group (gloo or nccl; None:
        the default group): rank and world size are the group's, and the unique id
        travels over the group from its rank 0. Collective over the group; the other
        arguments are init()'s. With an nccl group, set torch's current CUDA device
        first (torch.cuda.set_device), as torch.distributed asks."""
        try:
            import torch.distributed as dist
        except ImportError as error:
            raise Error(f"from_process_group needs torch.distributed ({error}); fix: install torch, or use "
                        "Communicator.init with a unique id you distribute") from None
        if not dist.is_available() or not dist.is_initialized():
            raise Error("from_process_group: torch.distributed has no initialized process group (expected "
                        "init_process_group to have run); fix: call torch.distributed.init_process_group first")
        rank = dist.get_rank(group)
        if rank < 0:
            raise Error("from_process_group: this process is not a member of the group (expected a group that "
                        "holds it); fix: call it on the group's ranks only")
        world_size = dist.get_world_size(group)
        source = 0 if group is None else dist.get_global_rank(group, 0)
        box = [bytes(Communicator.get_unique_id()) if rank == 0 else None]
        dist.broadcast_object_list(box, src=source, group=group)
        return Communicator.init(world_size, rank, box[0], target=target, device=device,
                                 device_ordinal=device_ordinal, timeout_seconds=timeout_seconds,
                                 gpu_per_node=gpu_per_node)

    rank = property(lambda self: self._native.rank)
    world_size = property(lambda self: self._native.world_size)
    # Ranks on this rank's node (gpu_per_node, or the ranks sharing its hostname).
    node_size = property(lambda self: self._native.node_size)
    # Bytes of this rank's symmetric memory alive now (the windows of its ops,
    # until each op and every view of its results are gone).
    symmetric_bytes = property(lambda self: self._native.symmetric_bytes)
    device = property(lambda self: self._native.device)

    def barrier(self):
        self._native.barrier()

    def destroy(self):
        """Closes the ops built on this communicator (their memory is its), then
        leaves it: an op dropped later, by the garbage collector after the
        communicator's `with` block, has nothing left to free."""
        for op in list(self._ops):
            op._op.close(keep_memory=False)  # views of its results die with the communicator
        self._native.destroy()


class EpDispatchCombineConfig:
    """MORI EPv2's config, keyword fields as in mori (data_type etc. as strings or dtypes)."""

    _PLAIN = ("rank", "world_size", "hidden_dim", "max_num_inp_token_per_rank", "num_experts_per_rank",
              "num_experts_per_token", "scale_dim", "scale_type_size", "enable_std_moe", "max_total_recv_tokens",
              "kernel_backend", "gpu_per_node", "internode_auto_ll_max_tokens", "low_latency_combine",
              "peer_timeout_s", "target",
              "dispatch_block_num", "combine_block_num", "warp_num_per_block", "combine_warp_num_per_block",
              "send_block_num", "recv_block_num")

    def __init__(self, *, rank, world_size, hidden_dim, max_num_inp_token_per_rank, num_experts_per_rank,
                 num_experts_per_token, data_type="bf16", dispatch_data_type=None, combine_data_type=None,
                 combine_mode="gather", quant_type="none", internode_kernel="auto", receive_order="arrival",
                 std_moe_combine="rank_sums", std_moe_quant="none", schedule=None, **fields):
        self._native = _epjit._Config()
        values = dict(rank=rank, world_size=world_size, hidden_dim=hidden_dim,
                      max_num_inp_token_per_rank=max_num_inp_token_per_rank,
                      num_experts_per_rank=num_experts_per_rank, num_experts_per_token=num_experts_per_token, **fields)
        for name, value in values.items():
            if name not in self._PLAIN:
                raise TypeError(f"EpDispatchCombineConfig has no field {name!r}")
            if value is not None:
                setattr(self._native, name, value)
        self._native.set_data_type(_dtype_name(data_type, "data_type"))
        if (dispatch_data_type is None) != (combine_data_type is None):
            raise ValueError("dispatch_data_type and combine_data_type are set together or not at all")
        if dispatch_data_type is not None:
            self._native.set_leg_types(_dtype_name(dispatch_data_type, "dispatch_data_type"),
                                       _dtype_name(combine_data_type, "combine_data_type"))
        self._native.set_combine_mode(str(combine_mode))
        self._native.set_quant_type(str(quant_type))
        self._native.set_internode_kernel(str(internode_kernel))
        self._native.set_receive_order(str(receive_order))  # "source": DeepEP's order (docs/EP.md)
        # "weighted_entries": DeepEP's low-latency combine sums (docs/EP.md "Standard MoE")
        self._native.set_std_moe_combine(str(std_moe_combine))
        # "deepep_fp8[_pow2|_ue8m0]": the pack also writes OCP E4M3 codes with DeepEP's
        # per-128 scales (docs/EP.md "Standard MoE in fp8"; Op.std_moe_fp8())
        self._native.set_std_moe_quant(str(std_moe_quant))
        if schedule:  # [(max_tokens or None, dispatch blocks, dispatch warps, combine blocks, combine warps), ...]
            self._native.set_schedule([tuple(row) for row in schedule])

    def __getattr__(self, name):
        return getattr(self._native, name)

    def validate(self):
        self._native.validate()

    def resolved_schedule(self):
        """The geometry variants the op will compile: the schedule given, else the
        target's measured table with any geometry fields applied."""
        return self._native.resolved_schedule()


_MAX_WRAPPED_VIEWS = 1024


class Routing:
    """A dispatch's routing, to record into and replay: device memory of the op
    that made it (make_routing()), or one of the op's own that
    dispatch(return_routing=True) lends. The op records into a lent one again only
    once no Routing lent for it is alive, which a weak reference tells (a reference
    count would not: interpreters count differently, Python 3.14's borrowed stack
    references one fewer)."""

    __slots__ = ("_native", "__weakref__")

    def __init__(self, native):
        self._native = native

    tokens = property(lambda self: self._native.tokens, doc="the recorded call's token count (-1: none yet)")
    runs_internode_v2 = property(lambda self: self._native.runs_internode_v2,
                                 doc="whether the recorded call ran internode v2 (its replays do too)")

    def __repr__(self):
        return f"epjit.Routing(tokens={self.tokens})"


def _native_routing(routing, argument, optional=False):
    if routing is None and optional:
        return None
    if isinstance(routing, Routing):
        return routing._native
    raise Error(f"{argument} is a {type(routing).__name__}, not an epjit.Routing (expected one from make_routing() "
                "or dispatch(return_routing=True)); fix: pass the Routing itself")


class _Listing:
    """One of the op's own routings: its memory, the stream it is listed under, and
    the Routing lent for it last (weakly: the op's lists must not keep it alive)."""

    __slots__ = ("native", "stream", "lent")

    def __init__(self, native, stream):
        self.native, self.stream, self.lent = native, stream, None

    def lend(self):
        routing = Routing(self.native)
        self.lent = weakref.ref(routing)
        return routing


class EpDispatchCombineOp:
    """Dispatch and combine bound to a communicator; kernels are built (or loaded
    from the cache) at construction, calls only launch."""

    def __init__(self, config, comm):
        native_config = config._native
        if not native_config.target and comm.target:
            native_config.target = comm.target
        self._op = _epjit._Op(native_config, comm._native)
        self._own_stream = self._op.own_stream_handle  # read once: calls compare with it
        self._target = self._op.target
        self._fp8 = _target_fp8(self._target)  # the target's fp8 flavor, looked up once
        self._config = native_config
        # The op's leg types as built (the config object stays the caller's to change).
        self._dispatch_type, self._combine_type = native_config.dispatch_type, native_config.combine_type
        # Arrays handed out, by (view number, wrapping, torch?, ml_dtypes bf16?): calls
        # return the op's same buffers, wrapped once (see _view).
        self._wrapped = {}
        self._origins_id = None
        self._comm = comm
        comm._ops.add(self)
        self._bf16_numpy = False
        self._torch = False
        self._stream = None  # the stream handle calls launch on (None: the op's own)
        self._streamless = True  # the last call's caller had no stream: outputs final on return
        # Routings dispatch(return_routing=True) recorded into, by the stream of
        # their last use: one nobody else holds is recorded into again instead of a
        # new one, since dropping a routing frees device memory, and on a GPU a
        # free waits for every stream of the device.
        self._spares = {}  # stream -> [_Listing], and where the search there starts
        self._spares_next = {}
        self._listed = {}  # id(native routing) -> its _Listing
        # Routings a captured dispatch recorded into or replayed: the graph
        # writes or reads them at every replay, for as long as it lives, which
        # this op cannot see; handed to another call (another graph's included),
        # one would share its memory with the graph. Kept until close().
        self._graph_routings = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _wrap(self, value, bits_are_bf16=False):
        if value is None:
            return None
        if self._torch:
            import torch
            tensor = torch.from_numpy(value) if isinstance(value, _np.ndarray) else torch.from_dlpack(value)
            if bits_are_bf16 and tensor.dtype == torch.bfloat16:
                return tensor
            return tensor.view(torch.bfloat16) if bits_are_bf16 else tensor
        if bits_are_bf16 and self._bf16_numpy:
            import ml_dtypes
            return value.view(ml_dtypes.bfloat16)
        return value

    def _wrap_payload(self, value, data_type):
        """A dispatched payload in its own dtype: bf16 as above; fp8 as the target's
        torch.float8_e4m3fn / float8_e4m3fnuz (ml_dtypes' for numpy); fp4 as
        torch.float4_e2m1fn_x2 (numpy keeps the packed bytes: ml_dtypes' fp4 is one
        element per byte)."""
        if data_type not in ("fp8", "fp8_e4m3fn", "fp4"):
            return self._wrap(value, data_type == "bf16")
        wrapped = self._wrap(value)
        if wrapped is None:
            return None
        fp8 = "e4m3fn" if data_type == "fp8_e4m3fn" else self._fp8  # OCP whatever the target's
        if self._torch:
            import torch
            if data_type != "fp4":
                return wrapped.view(getattr(torch, "float8_" + fp8))
            fp4 = getattr(torch, "float4_e2m1fn_x2", None)  # torch >= 2.8
            return wrapped.view(fp4) if fp4 is not None else wrapped
        if data_type != "fp4":
            import ml_dtypes
            return wrapped.view(getattr(ml_dtypes, "float8_" + fp8))
        return wrapped

    def _view(self, view_id, payload=None):
        """The array behind a view number a native call returned, wrapped as a
        payload of type `payload` (_wrap_payload) or as is (None). Each is made
        once and handed out again: the op's buffers do not move between calls,
        and importing one into torch costs several microseconds."""
        if view_id is None:
            return None
        key = (view_id, payload, self._torch, self._bf16_numpy)
        wrapped = self._wrapped.get(key)
        if wrapped is None:
            if len(self._wrapped) >= _MAX_WRAPPED_VIEWS:  # combine's outputs differ per token count
                self._wrapped.clear()
            raw = self._op.view(view_id)
            wrapped = self._wrap(raw) if payload is None else self._wrap_payload(raw, payload)
            self._wrapped[key] = wrapped
        return wrapped

    def _follow_stream(self, tensor, stream):
        """GPU calls run on the caller's stream: `stream` (a CUDA stream pointer or a
        torch stream), else torch's current stream for torch CUDA tensors. A
        caller with neither (numpy arrays or torch CPU tensors on host ranks)
        has no stream to order by: its calls' outputs are final on return."""
        self._streamless = stream is None and not (self._torch and getattr(tensor, "is_cuda", False))
        if stream is not None:
            handle = int(getattr(stream, "cuda_stream", stream))
        elif self._torch and getattr(tensor, "is_cuda", False):
            handle = _current_stream_handle(tensor)
        else:
            return
        if handle == self._own_stream:
            handle = None  # stream=op.comm_stream: the op's own
        if handle != self._stream:
            if handle is None:
                self._op.use_own_stream()
            else:
                self._op.use_stream(handle)
            self._stream = handle

    def _final_on_return(self, result):
        """`result`, after the op's stream has finished with it when the caller has
        no stream to order by (_follow_stream)."""
        if self._streamless:
            self._op.synchronize()
        return result

    def _routing_to_record(self):
        """A routing for return_routing=True without record=: one handed out before
        that only this op still holds, last used on the stream calls launch on now
        (so this call's kernels are ordered after its last ones), else a new one."""
        # Only this stream's are searched, from after the last one taken: a
        # program that records one routing per layer and drops them after the
        # step finds the next one free at once, where a search of every routing
        # from the front passes each one still held and each of other streams.
        stream = self._stream
        spares = self._spares.setdefault(stream, [])
        count = len(spares)
        start = self._spares_next.get(stream, 0)
        for at in range(start, start + count):
            if at >= count:
                at -= count
            listing = spares[at]
            lent = listing.lent
            if lent is None or lent() is None:  # no Routing lent for it is alive
                self._spares_next[stream] = at + 1 if at + 1 < count else 0
                return listing.lend()
        listing = _Listing(self._op.make_routing(), stream)
        spares.append(listing)
        self._spares_next[stream] = 0  # the new one is last: the front comes next
        self._listed[id(listing.native)] = listing
        return listing.lend()

    def _relist(self, native, capturing):
        """A listed routing a call used: one a graph captured (as record= or
        routing=) leaves the lists for good (the graph replays into it); one used
        on another stream than the one it is listed under moves to this one's list,
        recorded into again only from there."""
        listing = self._listed[id(native)]
        if not capturing and listing.stream == self._stream:
            return
        self._spares[listing.stream].remove(listing)
        self._spares_next[listing.stream] = 0
        if capturing:
            del self._listed[id(native)]
            self._graph_routings.append(native)
            return
        self._spares.setdefault(self._stream, []).append(listing)
        listing.stream = self._stream

    def dispatch(self, input, weights, scales, indices, *, routing=None, return_routing=False, stream=None,
                 record=None, max_tokens_across_ranks=None, keep_call=False, token_count=None):
        """Returns (tokens, weights, scales, indices, total_recv[, routing]); total_recv
        is a 1-element device array (read it after synchronizing). With
        return_routing the routing is recorded into `record` (a make_routing() to
        reuse: no allocation on the call) or into a new one.
        max_tokens_across_ranks: the largest token count of any rank in this call,
        the same on every rank (DP attention); internode_kernel auto then picks
        v2 or v2_ll by it, so every rank picks alike (docs/EP.md "Internode").
        keep_call (with return_routing): the routing also keeps this call's received
        origins and indices, for recorded_call() after later dispatches.
        token_count: a one-element int32 array on the op's device, read when the call
        runs: the call moves the first token_count rows of input (the rest are padding,
        never sent; combine leaves their rows as they were), so one graph captured at
        max_num_inp_token_per_rank rows serves every batch size (docs/EP.md "One graph
        for every batch")."""
        result = self._dispatch(input, weights, scales, indices, routing, return_routing, stream, record,
                                max_tokens_across_ranks, keep_call, False, token_count)
        return self._final_on_return(result)

    def dispatch_send(self, input, weights, scales, indices, *, return_routing=False, stream=None, record=None,
                      max_tokens_across_ranks=None, keep_call=False, token_count=None):
        """A split dispatch's send half: dispatch()'s transfers and this rank's arrival,
        on at most config.send_block_num blocks; returns what dispatch() returns, valid
        once dispatch_recv() has run (after it, for callers without a stream). Until
        then the op takes no other call but dispatch_recv() (streams, events, check(),
        reset() and close() aside), and the inputs must stay as they are. docs/EP.md
        "Split calls"."""
        return self._dispatch(input, weights, scales, indices, None, return_routing, stream, record,
                              max_tokens_across_ranks, keep_call, True, token_count)

    def dispatch_recv(self):
        """A split dispatch's receive half: waits (on the device, one block) for every
        rank's rows and finishes the call dispatch_send() began."""
        self._op.dispatch_recv()
        self._final_on_return(None)

    def _dispatch(self, input, weights, scales, indices, routing, return_routing, stream, record,
                  max_tokens_across_ranks, keep_call, send_only, token_count):
        if keep_call and not return_routing:
            raise Error("dispatch(keep_call=True) without return_routing (expected return_routing=True: the call "
                        "is kept in the routing it records); fix: pass return_routing=True, or leave keep_call unset")
        self._torch = _is_torch(input)
        self._follow_stream(input, stream)
        self._bf16_numpy = _np is not None and isinstance(input, _np.ndarray) and input.dtype.name == "bfloat16"
        if return_routing and record is None:
            record = self._routing_to_record()
        elif not return_routing:
            record = None
        natives = (_native_routing(record, "record", optional=True), _native_routing(routing, "routing", optional=True))
        ids = self._op.dispatch(_to_native(input, self._target, self._fp8), weights,
                                _to_native(scales, self._target, self._fp8), indices,
                                *natives, max_tokens_across_ranks, keep_call, send_only, token_count)
        # Only routings in the lists (not the caller's own make_routing(), nor a
        # graph's) move, so only for them is the stream asked.
        listed = [used for used in natives if used is not None and id(used) in self._listed]
        if listed:
            capturing = self._op.capturing()
            for used in listed:
                self._relist(used, capturing)
        view = self._view
        result = (view(ids[0], self._dispatch_type), view(ids[1]), view(ids[2]), view(ids[3]), view(ids[4]))
        self._origins_id = ids[5]
        return result + (record,) if return_routing else result

    def combine(self, input, weights=None, indices=None, *, routing=None, stream=None, output=None,
                output_weights=None):
        """Returns (out [tokens, hidden], out_weights or None). `indices` and `routing`
        are accepted for MORI compatibility: combine always answers the last dispatch.
        output [tokens, hidden] of the combine type and output_weights [tokens, top-k]
        float32 (with weights): arrays of the caller's that the combine writes instead of
        the op's buffers, returned as out and out_weights (one node only)."""
        self._follow_stream(input, stream)
        ids = self._op.combine(_to_native(input, self._target, self._fp8), weights, False,
                               _to_native(output, self._target, self._fp8), output_weights)
        out = output if ids[0] is None else self._view(ids[0], self._combine_type)
        out_weights = output_weights if ids[1] is None else self._view(ids[1])
        return self._final_on_return((out, out_weights))

    def combine_send(self, input, weights=None, indices=None, *, routing=None, stream=None):
        """A split combine's send half (combine()'s arguments): the rows leave and this
        rank arrives, on at most config.send_block_num blocks; combine_recv() returns
        the result. `input` and `weights` must stay as they are until combine_recv()
        has run (it reads this rank's own rows in place)."""
        self._follow_stream(input, stream)
        self._op.combine(_to_native(input, self._target, self._fp8), weights, True)

    def combine_recv(self):
        """A split combine's receive half (of combine_send() or std_moe_combine_send()):
        the sums, on at most config.recv_block_num blocks; returns (out, out_weights or
        None) as combine() does."""
        ids = self._op.combine_recv()
        return self._final_on_return((self._view(ids[0], self._combine_type), self._view(ids[1])))

    def received_origins(self):
        """[capacity, 2] int32 for the last dispatch: per received row, its source
        rank * max_num_inp_token_per_rank + source token, and its ordinal among that
        token's destinations (MORI's disp_tok_id_to_src_tok_id / get_dispatch_src_token_pos)."""
        if self._origins_id is None:
            raise Error("received_origins() before any dispatch (expected a dispatch first); fix: call dispatch()")
        return self._view(self._origins_id)

    def std_moe_pack(self):
        """Standard MoE, after dispatch: (tokens [experts_per_rank, world * max_tokens,
        hidden] bf16, counts [experts_per_rank] int32, sources [experts_per_rank, world *
        max_tokens] int32): each received token once per local expert it names, packed
        per expert in arrival order, with its receive row. Needs enable_std_moe."""
        ids = self._op.std_moe_pack()
        return self._final_on_return((self._view(ids[0], "bf16"), self._view(ids[1]), self._view(ids[2])))

    def std_moe_outputs(self):
        """The arrays std_moe_pack() fills and returns, without a launch (a split
        dispatch's caller takes them before dispatch_recv() and the pack)."""
        ids = self._op.std_moe_outputs()
        return self._view(ids[0], "bf16"), self._view(ids[1]), self._view(ids[2])

    def std_moe_fp8(self):
        """With std_moe_quant: (codes, scales) that std_moe_pack() also fills, without a
        launch. codes [experts_per_rank, world * max_tokens, hidden] float8_e4m3fn (OCP on
        every target) are the packed rows cast as DeepEP's low-latency dispatch casts
        them; scales are stored column-major per expert: float32 [experts_per_rank,
        hidden / 128, rows] (amax / 448, or its power of two), or for deepep_fp8_ue8m0
        int32 [experts_per_rank, hidden / 512, rows] words of four UE8M0 bytes. DeepEP's
        x_scales is scales.transpose(1, 2)."""
        ids = self._op.std_moe_fp8()
        return self._view(ids[0], "fp8_e4m3fn"), self._view(ids[1])

    def std_moe_combine(self, expert_out, weights=None, indices=None, output=None):
        """Standard MoE, back: expert_out in std_moe_pack's layout (bf16) is summed per
        received token (its local experts in top-k order, in f32, rounded once), then
        combined as combine() would; returns (out, out_weights or None).
        With std_moe_combine="weighted_entries": weights and indices are this rank's
        dispatched top-k weights [n, k] f32 and indices [n, k] int32 or int64, and each token is
        the sum of its expert rows times its own weights, in top-k order (fused
        multiply-adds in f32 from +0.0, rounded once: DeepEP's low-latency combine);
        returns (out, None), out being `output` ([n, hidden] bfloat16) when given."""
        ids = self._op.std_moe_combine(_to_native(expert_out, self._target, self._fp8), weights, False, indices,
                                       output)
        return self._final_on_return((self._view(ids[0], self._combine_type), self._view(ids[1])))

    def std_moe_combine_send(self, expert_out, weights=None, indices=None, output=None):
        """std_moe_combine()'s send half; combine_recv() returns its result."""
        self._op.std_moe_combine(_to_native(expert_out, self._target, self._fp8), weights, True, indices, output)

    def std_moe_combine_input(self):
        """std_moe_combine="weighted_entries": write expert outputs here, in std_moe_pack's
        layout, to skip the combine's staging copy (DeepEP's zero-copy combine buffer)."""
        return self._view(self._op.std_moe_combine_input(), "bf16")

    def combine_input(self):
        """Gather combine: write expert outputs here to skip combine's staging copy."""
        return self._view(self._op.combine_input(), self._combine_type)

    config_dispatch_type = property(lambda self: self._config.dispatch_type)
    config_combine_type = property(lambda self: self._config.combine_type)

    def local_expert_counts(self, on_device=False, every_entry=False):
        """Received tokens per local expert in the dispatch awaiting combine (called
        after combine it raises: a peer's next dispatch may be writing the rows), each token once per
        expert it names; with every_entry=True every received (token, k) on a local
        expert counts, repeats too (MORI's rule). By default a list, counted on the
        host (synchronizes); with on_device=True a [num_experts_per_rank] int32 device
        array (a torch tensor after torch inputs) filled on the op's stream without
        synchronizing, valid until the next such call."""
        if on_device:
            return self._final_on_return(self._view(self._op.local_expert_counts_device(every_entry)))
        return self._op.local_expert_counts(every_entry)

    def received_counts(self, every_entry=False, expert_alignment=1):
        """(received rows, per-local-expert counts as local_expert_counts() gives them)
        for the dispatch awaiting combine, counted on the device and read in one copy
        (synchronizes the op's stream). expert_alignment > 1 rounds each expert's count
        up to a multiple of it (DeepEP's expert_alignment); the rows stay as received."""
        return self._op.received_counts(every_entry, expert_alignment)

    def dispatch_layout(self, indices, per_rank, per_expert, in_rank, *, per_node=None, stream=None):
        """What a dispatch of `indices` ([n, top-k] int64, -1 for none) would send,
        before it runs (DeepEP's get_dispatch_layout), into the caller's arrays:
        per_rank [world_size] int32 (tokens per rank, a token once per rank),
        per_expert [num_experts] int32 (entries per expert, repeats too) and in_rank
        [n, world_size] bool or uint8 (1 where the token goes to the rank); across
        nodes also per_node [world_size // gpu_per_node] int32 (tokens per node, a
        token once per node: DeepEP's num_tokens_per_rdma_rank). Negative ids
        and experts past the last count nowhere. One launch on the op's stream (the
        caller's, as for dispatch), no synchronization, at any time between calls."""
        self._torch = _is_torch(indices)
        self._follow_stream(indices, stream)
        self._op.dispatch_layout(indices, per_rank, per_expert, in_rank, per_node)
        self._final_on_return(None)

    def deliver_received(self, tokens, local_experts=None, *, scales=None, weights=None, stream=None):
        """Copies the dispatch awaiting combine's received rows into the caller's arrays,
        `rows` each (tokens' first dimension, at most capacity): tokens [rows, hidden] of
        the dispatch type, scales [rows, scale_dim] (ops with scales), and each row's
        top-k as local expert ids into local_experts [rows, top-k] int64 (-1 where the
        expert is on another rank), with their weights into weights [rows, top-k]
        float32 (0 elsewhere), each where given: DeepEP's normal-mode dispatch outputs, in one launch
        that does not synchronize. Rows past the received count keep their token and
        scale bytes and get -1 and 0."""
        self._follow_stream(tokens, stream)
        self._op.deliver_received(_to_native(tokens, self._target, self._fp8), _to_native(scales, self._target,
                                  self._fp8), local_experts, weights)
        self._final_on_return(None)

    def route_map(self, routing):
        """A recorded routing's map, int32 on the op's device, laid out as
        buffer_parts("route") says (per token its distinct destinations as rank *
        capacity + slot, the received count, the tokens sent to each off-node rank,
        internode v2's forward route; docs/EP.md "Buffers")."""
        return self._view(self._op.route_map(_native_routing(routing, "routing")))

    def buffer_parts(self, buffer):
        """{part: (offset, count, meaning)} of one of the op's buffers ("route", "kept",
        "outputs", "std_moe"), offsets and counts in elements of the part, as the
        kernels' interface record states them (templates/ep/buffers.mlir)."""
        return self._op.buffer_parts(buffer)

    def recorded_call(self, routing):
        """What a dispatch with return_routing and keep_call=True kept in `routing`:
        (total_recv [1], origins [capacity, 2] as received_origins(), indices [tokens,
        top-k] as passed), int32 arrays of the routing's memory on the op's device,
        valid until the routing records or loads again; copies made on the
        dispatch's stream."""
        ids = self._op.recorded_call(_native_routing(routing, "routing"))
        return self._view(ids[0]), self._view(ids[1]), self._view(ids[2])

    def load_routing(self, routing, map, tokens, max_tokens_across_ranks=None):
        """Makes `routing` (from make_routing()) replay `map` (route_map()'s layout, on
        the op's device) for `tokens` tokens; checked first (synchronizes).
        max_tokens_across_ranks as the recorded dispatch had it."""
        self._op.load_routing(_native_routing(routing, "routing"), map, int(tokens), max_tokens_across_ranks)

    def record_event(self):
        """An epjit.Event marking what the op's stream has enqueued so far (DeepEP's
        async_finish): another stream may wait for it (wait_event, or torch's
        stream.wait_event for a torch.cuda.Event you record on comm_stream)."""
        return self._op.record_event()

    def wait_event(self, event):
        """Later calls on the op's stream start after `event` (an epjit.Event, or a
        torch.cuda.Event: DeepEP's previous_event), without the host waiting."""
        if isinstance(event, _epjit.Event):
            return self._op.wait_event(event)
        if type(event).__module__.startswith("torch") and hasattr(event, "record"):
            import torch
            torch.cuda.ExternalStream(self._stream or self._own_stream).wait_event(event)
            return None
        raise TypeError(f"wait_event({type(event).__name__}): expected an epjit.Event (op.record_event()) or a "
                        "torch.cuda.Event")

    comm_stream = property(lambda self: self._own_stream, doc="""The op's own stream (a CUDA or
        HIP stream handle; 0 on the host): pass stream=op.comm_stream to run calls there.""")

    def make_routing(self):
        """A Routing of your own to record into (record=) and replay (routing=)."""
        return Routing(self._op.make_routing())

    def synchronize(self):
        self._op.synchronize()

    def check(self):
        self._op.check()

    def reset(self):
        self._op.reset()

    def close(self):
        self._op.close()
        self._wrapped.clear()  # what callers still hold keeps the memory; the rest goes with the op

    capacity = property(lambda self: self._op.capacity)
    target = property(lambda self: self._op.target)
