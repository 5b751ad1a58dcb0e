"""MORI EPv2's EpDispatchCombineOp and routing handle on epjit's op.

The numerics are epjit's (the same as MORI's: f32 sums in destination order, one
rounding). What this layer adds is MORI's contract where epjit's own API differs:
combine takes the origin's weights (or none) and returns the summed forwarded ones,
local_expert_count() counts every (token, k) assignment, the routing handle exposes
MORI's maps, std-MoE conversion applies the routing weights, and a symmetric fp8
op combines fp8 tokens. docs/PYTHON.md lists what still differs.
"""
import epjit

_SCALE_DTYPES = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _torch():
    import torch
    return torch


def _epjit_dtype(dtype):
    return epjit._dtype_name(dtype, "data_type")


class _MadeOnFirstUse:
    """A routing handle's tensor: as given, or (a handle return_routing=True gave)
    made on first read by `make(handle)` from what its dispatch kept. Settable.
    Kept in the handle's `_<name>`."""

    def __init__(self, make):
        self.make = make

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, handle, owner=None):
        if handle is None:
            return self
        value = handle.__dict__[self.slot]
        if value is None and handle._recorder is not None:
            value = handle.__dict__[self.slot] = self.make(handle)
        return value

    def __set__(self, handle, value):
        handle.__dict__[self.slot] = value


class EpDispatchRoutingHandle:
    """One dispatch's routing, replayable (MORI's EpDispatchRoutingHandle).

    disp_dest_tok_id_map: [max_tokens * k] int32, per (source token, k) the receive
    slot on the rank of expert k, as rank * max_recv + slot (-1: masked or not sent).
    total_recv_token_num: [1] int32, the rows this rank received.
    disp_tok_id_to_src_tok_id_local: [max_recv] int32, per receive slot its source
    rank * max_tokens + source token (valid below total_recv_token_num).
    inter_node_*: empty (this op is intranode), kept for MORI's five-tensor layout.

    A handle return_routing=True gave makes these three tensors on first use,
    since most programs only pass the handle back: from what its dispatch kept in
    the handle's epjit Routing (the received origins and the caller's indices,
    copied on the dispatch's stream), so they hold that dispatch's values however
    many dispatches followed. Each is made on torch's current stream: read them on
    the dispatch's stream, or after it.
    """

    disp_dest_tok_id_map = _MadeOnFirstUse(
        lambda h: h._recorder._mori_forward(h._routing, h._recorded_call()[2], h.cur_rank_num_token))
    total_recv_token_num = _MadeOnFirstUse(lambda h: h._recorded_call()[0].clone())
    disp_tok_id_to_src_tok_id_local = _MadeOnFirstUse(lambda h: h._recorded_call()[1][:, 0].contiguous())

    def __init__(self, disp_dest_tok_id_map, inter_node_disp_dest_tok_id_map, inter_node_disp_send_map,
                 total_recv_token_num, disp_tok_id_to_src_tok_id_local, cur_rank_num_token=0):
        # The made-on-first-use tensors' slots, set directly: a handle per recording call.
        self._disp_dest_tok_id_map = disp_dest_tok_id_map
        self._total_recv_token_num = total_recv_token_num
        self._disp_tok_id_to_src_tok_id_local = disp_tok_id_to_src_tok_id_local
        self.inter_node_disp_dest_tok_id_map = inter_node_disp_dest_tok_id_map
        self.inter_node_disp_send_map = inter_node_disp_send_map
        self.cur_rank_num_token = cur_rank_num_token
        self._recorder = None  # the op whose dispatch kept this handle's call (lazy tensors)
        # epjit's Routing when an op of this process recorded or loaded it; that op
        # records into it again once no handle holds it (epjit's own recycling).
        self._routing = None
        self._op_id = None

    @classmethod
    def _kept(cls, op, routing, tokens, empty):
        """A handle of the call `op` just recorded into `routing` with keep_call."""
        handle = cls(None, empty, empty, None, None, cur_rank_num_token=tokens)
        handle._recorder = op
        return handle

    def _recorded_call(self):
        return self._recorder._op.recorded_call(self._routing)

    def tensors(self):
        return (self.disp_dest_tok_id_map, self.inter_node_disp_dest_tok_id_map, self.inter_node_disp_send_map,
                self.total_recv_token_num, self.disp_tok_id_to_src_tok_id_local)

    @classmethod
    def from_tensors(cls, tensors, cur_rank_num_token=0):
        return cls(*tensors, cur_rank_num_token=cur_rank_num_token)


class EpDispatchCombineOp:
    """MORI's v2 op: collective construction over a mori.cco Communicator; calls
    enqueue on torch's current stream and never synchronize the host (except
    replaying a handle rebuilt with from_tensors, whose maps are checked first)."""

    def __init__(self, cfg, comm):
        comm._check_valid("build an op")
        self.cfg, self.comm = cfg, comm
        legs = {}
        data_type = _epjit_dtype(cfg.data_type)
        if cfg.dispatch_data_type is not None:
            legs = dict(dispatch_data_type=_epjit_dtype(cfg.dispatch_data_type),
                        combine_data_type=_epjit_dtype(cfg.combine_data_type))
        elif data_type == "fp8":
            # A symmetric fp8 op: fp8 crosses on dispatch; combine sums the fp8
            # expert outputs (widened exactly to bf16) in f32 and returns fp8.
            legs = dict(dispatch_data_type="fp8", combine_data_type="bf16")
        geometry = {name: getattr(cfg, name) for name in
                    ("dispatch_block_num", "combine_block_num", "warp_num_per_block", "combine_warp_num_per_block")
                    if getattr(cfg, name) is not None}
        self._config = epjit.EpDispatchCombineConfig(
            rank=cfg.rank, world_size=cfg.world_size, hidden_dim=cfg.hidden_dim,
            max_num_inp_token_per_rank=cfg.max_num_inp_token_per_rank,
            num_experts_per_rank=cfg.num_experts_per_rank, num_experts_per_token=cfg.num_experts_per_token,
            data_type=data_type, combine_mode=cfg.combine_mode, quant_type=cfg.quant_type,
            internode_kernel=cfg.internode_kernel, schedule=cfg.schedule, scale_dim=cfg.scale_dim,
            scale_type_size=cfg.scale_type_size, enable_std_moe=cfg.enable_std_moe,
            max_total_recv_tokens=cfg.effective_max_recv if cfg.max_total_recv_tokens > 0 else 0,
            gpu_per_node=cfg.gpu_per_node, internode_auto_ll_max_tokens=cfg.internode_auto_ll_max_tokens,
            **legs, **geometry)
        self._op = epjit.EpDispatchCombineOp(self._config, comm._epjit)
        # The route map's layout (the kernels' interface record), read once: it is the op's for life.
        self._route_parts = self._op.buffer_parts("route")
        self._fp8_symmetric = data_type == "fp8" and cfg.dispatch_data_type is None
        self._last = None      # the latest dispatch's outputs
        self._latest = None    # the handle (or epjit routing) that dispatch used or recorded
        self._no_weights = None
        self._staging = None   # combine's input rows (_combine_staging)
        self._max_recv = self._op.capacity
        self._staging_elements = self._max_recv * cfg.hidden_dim
        self._host_ranks = self._device == "cpu"
        self._empty = None
        self._packed = None    # convert_dispatch_output()'s (tokens, counts, receive rows)
        comm._track(self)

    # -- helpers -----------------------------------------------------------------
    @property
    def _device(self):
        return "cuda" if self.comm._epjit.device in ("cuda", "hip") else "cpu"

    @property
    def max_recv(self):
        return self._max_recv

    def _settle(self):
        """Host ranks: wait for the op's call. CPU tensors have no stream to order
        torch's reads after it (on GPUs both run on torch's current stream)."""
        if self._host_ranks:
            self._op.synchronize()

    def _weights_or_zeros(self, weights, n):
        if weights is not None:
            return weights
        torch = _torch()
        k = self.cfg.num_experts_per_token
        if self._no_weights is None:
            self._no_weights = torch.zeros(self.cfg.max_num_inp_token_per_rank, k, dtype=torch.float32,
                                           device=self._device)
        return self._no_weights[:n]

    def _scales_of(self, scales, n):
        """MORI takes scales as any tensor with scale_dim * scale_type_size bytes per
        token; epjit as [n, scale_dim] elements of scale_type_size bytes."""
        if scales is None or self.cfg.scale_dim == 0:
            return None
        torch = _torch()
        per_token = self.cfg.scale_dim * self.cfg.scale_type_size
        raw = scales.contiguous().view(torch.uint8).reshape(n, -1)
        if raw.shape[1] != per_token:
            raise epjit.Error(f"scales have {raw.shape[1]} bytes per token (expected scale_dim * scale_type_size = "
                              f"{per_token}); fix: pass [tokens, scale_dim] scales of scale_type_size bytes each")
        return raw.view(getattr(torch, _SCALE_DTYPES[self.cfg.scale_type_size]))

    def _runs_v2(self, n):
        """Does a call auto picks by n tokens run epjit's internode v2
        (EpDispatchCombineConfig::runs_internode_v2)?"""
        cfg = self.cfg
        per_node = cfg.gpu_per_node or cfg.world_size
        if per_node >= cfg.world_size:
            return False
        kernel = str(cfg.internode_kernel)
        return kernel == "v2" or (kernel == "auto" and n > cfg.internode_auto_ll_max_tokens)

    def _destination_ordinals(self, indices, n, v2):
        """Per (token, k) of the first n tokens: valid (not masked), first (the entry
        that opens its send target), and the ordinal of its target among the token's
        distinct targets in order of first appearance (epjit's route order). A target
        is the expert's rank, except in an internode v2 call, where a rank of another
        node is reached through that node's rail peer (docs/EP.md)."""
        torch = _torch()
        cfg = self.cfg
        k = cfg.num_experts_per_token
        idx = indices[:n].long()
        valid = idx >= 0
        ranks = torch.where(valid, idx // cfg.num_experts_per_rank, torch.full_like(idx, -1))
        if v2:
            per_node = cfg.gpu_per_node
            node = ranks.div(per_node, rounding_mode="floor")
            rail = node * per_node + cfg.rank % per_node
            ranks = torch.where(valid & (node != cfg.rank // per_node), rail, ranks)
        same = (ranks[:, :, None] == ranks[:, None, :]) & valid[:, None, :]
        earlier = torch.tril(torch.ones(k, k, dtype=torch.bool, device=idx.device), diagonal=-1)
        first = valid & ~(same & earlier[None]).any(dim=2)
        upto = earlier | torch.eye(k, dtype=torch.bool, device=idx.device)
        opener = (same & upto[None]).int().argmax(dim=2)  # the entry that opened this one's rank
        ordinal_of_first = torch.cumsum(first.long(), dim=1) - 1
        return valid, first, torch.gather(ordinal_of_first, 1, opener)

    def _mori_forward(self, routing, indices, n):
        """MORI's forward map [max_tokens * k] from epjit's route (per token, its
        distinct ranks in order of first appearance) and the dispatch's indices."""
        torch = _torch()
        cfg = self.cfg
        k, m = cfg.num_experts_per_token, cfg.max_num_inp_token_per_rank
        at, count, _ = self._route_parts["route_entries"]
        route = self._op.route_map(routing)[at : at + count].view(m, k)
        forward = torch.full((m, k), -1, dtype=torch.int32, device=route.device)
        if n:
            valid, _, ordinal_of_entry = self._destination_ordinals(indices, n, routing.runs_internode_v2)
            entry = torch.gather(route[:n].long(), 1, ordinal_of_entry.clamp(min=0))
            # epjit's entry is rank * capacity + slot, MORI's rank * max_recv + slot: the same numbers.
            forward[:n] = torch.where(valid & (entry >= 0), entry, torch.full_like(entry, -1)).int()
        return forward.reshape(-1)

    def _route_map_of(self, entries, total, sent):
        """A route map without its forward route, where the op's interface record
        puts each part (route_map()'s layout; load_routing() takes it)."""
        torch = _torch()
        parts = self._route_parts
        flat = torch.zeros(parts["route_forward"][0], dtype=torch.int32, device=entries.device)
        for name, words in (("route_entries", entries), ("route_received", total), ("route_sent", sent)):
            at, count, _ = parts[name]
            flat[at : at + count] = words.int()
        return flat

    def _handle_routing(self, routing, indices, n, max_tokens_across_ranks):
        """epjit's Routing for a handle: its own, or one loaded from MORI's maps."""
        if routing._routing is not None and routing._op_id == id(self):
            return routing._routing
        return self._load_mori_maps(routing, indices, n, max_tokens_across_ranks)

    def _load_mori_maps(self, handle, indices, n, max_tokens_across_ranks):
        """A handle from from_tensors: MORI's forward map back to epjit's route."""
        torch = _torch()
        cfg = self.cfg
        k, m = cfg.num_experts_per_token, cfg.max_num_inp_token_per_rank
        if handle.cur_rank_num_token and handle.cur_rank_num_token != n:
            raise epjit.Error(f"replay of {n} tokens with a routing recorded for {handle.cur_rank_num_token}; fix: "
                              "replay with the batch the routing was recorded for")
        forward = handle.disp_dest_tok_id_map.reshape(m, k).long()
        largest = n if max_tokens_across_ranks is None else int(max_tokens_across_ranks)
        _, first, ordinal = self._destination_ordinals(indices, n, self._runs_v2(largest))
        route = torch.full((m, k), -1, dtype=torch.int64, device=forward.device)
        rows = torch.arange(n, device=forward.device)[:, None].expand(n, k)
        route[rows[first], ordinal[first]] = forward[:n][first]
        total = handle.total_recv_token_num.reshape(-1)[:1].long().to(forward.device)
        # epjit's map also holds the tokens sent to each off-node rank (its
        # outbox slots are 0, 1, ...: the count of entries naming the rank).
        world, per_node = cfg.world_size, cfg.gpu_per_node or cfg.world_size
        named = route[route >= 0] // self._op.capacity
        sent = torch.bincount(named, minlength=world)[:world]
        node = torch.arange(world, device=forward.device) // per_node == cfg.rank // per_node
        sent = torch.where(node, torch.zeros_like(sent), sent)
        flat = self._route_map_of(route.reshape(-1), total, sent)
        recorded = self._op._routing_to_record()
        self._op.load_routing(recorded, flat, n, max_tokens_across_ranks)  # checked on the host: synchronizes
        self._adopt(handle, recorded)
        return recorded

    # -- the op ----------------------------------------------------------------
    def dispatch(self, input, weights, scales, indices, *, routing=None, return_routing=False,
                 max_tokens_across_ranks=None, _send_only=False):
        """Returns (out [max_recv, hidden], out_weights [max_recv, k], out_scales or
        None, out_indices [max_recv, k], total_recv [1] int32 on the device[, routing]).
        max_tokens_across_ranks (epjit's, not MORI's): the largest token count of any
        rank in this call, the same on every rank, for internode_kernel auto under
        DP attention (docs/EP.md "Internode")."""
        if routing is not None and return_routing:
            raise ValueError("pass either routing= (replay) or return_routing=True, not both")
        n = int(input.shape[0])
        weights = self._weights_or_zeros(weights, n)
        caller_scales = scales
        scales = self._scales_of(scales, n)
        replay = (self._handle_routing(routing, indices, n, max_tokens_across_ranks) if routing is not None
                  else None)
        # With return_routing epjit's op records into a routing no handle holds any
        # more, last dispatched on this call's stream, else a new one.
        if _send_only:  # MORI v1's dispatch_send: the results are valid once dispatch_recv() has run
            result = self._op.dispatch_send(input, weights, scales, indices, return_routing=return_routing,
                                            max_tokens_across_ranks=max_tokens_across_ranks, keep_call=return_routing)
        else:
            result = self._op.dispatch(input, weights, scales, indices, routing=replay, return_routing=return_routing,
                                       max_tokens_across_ranks=max_tokens_across_ranks, keep_call=return_routing)
        out, out_w, out_s, out_idx, total = result[:5]
        out_s = self._scales_as_passed(out_s, caller_scales)
        self._settle()
        self._last = dict(n=n, out=out, weights=out_w, indices=out_idx, total=total)
        base = (out, out_w, out_s, out_idx, total)
        if not return_routing:
            self._latest = routing
            return base
        recorded = result[5]
        if self._empty is None:
            torch = _torch()
            self._empty = torch.empty(0, dtype=torch.int32, device=total.device)
        handle = EpDispatchRoutingHandle._kept(self, recorded, n, self._empty)
        self._adopt(handle, recorded)
        self._latest = handle
        return base + (handle,)

    @staticmethod
    def _scales_as_passed(out_s, passed):
        """The received scales in the dtype the caller passed them in, that dtype's
        elements per row (MORI's shape: [max_recv, scale bytes / itemsize]); a view of
        the same memory, no copy."""
        if out_s is None or passed is None or out_s.dtype == passed.dtype:
            return out_s
        return out_s.view(_torch().uint8).view(passed.dtype).reshape(out_s.shape[0], -1)

    def _adopt(self, handle, routing):
        """Ties `routing` to `handle`: the handle replays it, and while the handle
        lives epjit's op does not record into it."""
        handle._routing, handle._op_id = routing, id(self)

    def _combine_staging(self, input):
        """Where combine reads expert outputs: the window's staging rows (gather) or
        the op's own [max_recv, hidden] buffer (scatter); `input` is copied in
        unless it is already there (MORI takes fewer rows than max_recv), or it has
        max_recv rows of the combine type: epjit's combine reads those itself (gather
        stages only the received rows, on the device; scatter reads them in place),
        where a copy here would move all max_recv rows however few arrived. Runs on
        every combine, so it asks torch as little as it can."""
        staging = self._staging
        if staging is None:
            staging = self._staging = self._make_staging()
        if input.data_ptr() == staging.data_ptr():
            return staging
        rows = int(input.shape[0])
        if (rows == self._max_recv and input.dtype == staging.dtype and input.is_contiguous()
                and input.numel() == self._staging_elements and input.device == staging.device):
            return input if input.dim() == 2 else input.view(rows, self.cfg.hidden_dim)
        if rows > self._max_recv:
            raise epjit.Error(f"combine input has {rows} rows (expected at most max_recv = {self._max_recv}); "
                              "fix: pass the expert outputs of the received rows")
        staging[:rows].copy_(input.reshape(rows, self.cfg.hidden_dim))  # widens fp8 exactly; rows may be 0
        return staging

    def _make_staging(self):
        """The op's combine input rows: the window's (gather, valid until close) or a
        [max_recv, hidden] buffer of the combine type (scatter)."""
        torch = _torch()
        if self.cfg.combine_mode == "gather":
            return self._op.combine_input()
        dtype = torch.bfloat16 if self._op.config_combine_type == "bf16" else torch.float32
        return torch.empty(self._max_recv, self.cfg.hidden_dim, dtype=dtype, device=self._device)

    def combine(self, input, weights=None, indices=None, *, routing=None):
        """Returns (out [tokens, hidden], out_weights [tokens, k]): every token's expert
        outputs summed in f32 in destination order, rounded once; out_weights the
        forwarded weights summed alike. `weights` and `indices` are accepted as MORI
        accepts them (the weights that travel are the dispatched ones)."""
        if self._last is None:
            raise epjit.Error("combine without a dispatch before it; fix: call dispatch() first")
        if routing is not None and self._latest is not None and routing is not self._latest:
            raise epjit.Error("combine with a routing other than the latest dispatch's (epjit combines the latest "
                              "dispatch); fix: combine after each dispatch, or pass that dispatch's routing")
        out, out_w = self._combine_rows(input, self._last["weights"])
        if self._fp8_symmetric:
            out = out.to(_torch().float8_e4m3fn if self._op._fp8 == "e4m3fn" else _torch().float8_e4m3fnuz)
        return out, out_w

    def _combine_rows(self, input, weights, send_only=False):
        """epjit's combine of `input` (staged as _combine_staging says) with `weights`
        ([max_recv, k] f32, per received row, or None): (out, out_weights or None) in
        the op's combine type; with send_only, the send half (combine_recv() returns them)."""
        staging = self._combine_staging(input)
        if send_only:
            self._op.combine_send(staging, weights)
            self._settle()
            return None
        out, out_w = self._op.combine(staging, weights)
        self._settle()
        return out, out_w

    def _dispatch_recv(self):
        """The receive half of a dispatch made with _send_only."""
        self._op.dispatch_recv()
        self._settle()

    def _combine_recv(self):
        """The receive half of a _combine_rows(send_only=True): (out, out_weights or None)."""
        out, out_w = self._op.combine_recv()
        self._settle()
        return out, out_w

    def local_expert_count(self):
        """[num_experts_per_rank] int32 on the device: received (token, k) assignments
        per local expert, every k counted (MORI's rule; the sum over ranks is the
        number of valid (token, k) entries sent). Counted by a generated kernel on
        the op's stream, no synchronization; valid until the next call of it. Call
        it after dispatch and before combine (MORI's contract); after combine it
        raises, since a peer's next dispatch may be writing the received rows."""
        if self._last is None:
            raise epjit.Error("local_expert_count before any dispatch; fix: call dispatch() first")
        counts = self._op.local_expert_counts(on_device=True, every_entry=True)
        self._settle()
        return counts

    # -- standard MoE ------------------------------------------------------------
    def convert_dispatch_output(self):
        """(packed_x [experts_per_rank, world * max_tokens, hidden] bf16, packed_count
        [experts_per_rank] int32, packed_src [experts_per_rank, world * max_tokens]
        int32 = source rank * max_tokens + source token): each received token once
        per local expert it names, packed per expert. The expert GEMM overwrites
        packed_x in place."""
        torch = _torch()
        tokens, counts, rows = self._op.std_moe_pack()
        self._settle()
        origins = self._op.received_origins()[:, 0]
        filled = torch.arange(rows.shape[1], device=rows.device)[None, :] < counts[:, None].long()
        src = torch.where(filled, origins[rows.long().clamp(min=0)], torch.full_like(rows, -1))
        self._packed = (tokens, counts, rows)
        return tokens, counts, src

    def convert_combine_input(self, routing=None):
        """Writes each received token's weighted sum of its local experts' outputs
        (sum over k of weight[k] * packed_x[slot of k] in k order, f32, one rounding;
        MORI's ConvertCombineInput) over the dispatch's output rows, as MORI does;
        combine() of those rows then sums the partials across ranks. Returns them."""
        if self._packed is None:
            raise epjit.Error("convert_combine_input before convert_dispatch_output; fix: convert the dispatch "
                              "output first")
        torch = _torch()
        cfg = self.cfg
        epr, k = cfg.num_experts_per_rank, cfg.num_experts_per_token
        tokens, counts, rows = self._packed
        cap = self.max_recv
        idx = self._last["indices"].long()
        w = self._last["weights"]
        # The packed row of each (received row, local expert).
        position = torch.full((cap, epr), -1, dtype=torch.long, device=rows.device)
        filled = torch.arange(rows.shape[1], device=rows.device)[None, :] < counts[:, None].long()
        experts = torch.arange(epr, device=rows.device)[:, None].expand_as(rows)
        slots = torch.arange(rows.shape[1], device=rows.device)[None, :].expand_as(rows)
        position[rows.long()[filled], experts[filled]] = experts[filled] * rows.shape[1] + slots[filled]
        packed = tokens.reshape(-1, cfg.hidden_dim)
        total = torch.zeros(cap, cfg.hidden_dim, dtype=torch.float32, device=rows.device)
        received = torch.arange(cap, device=rows.device)
        for j in range(k):
            local = idx[:, j] - cfg.rank * epr
            is_local = (local >= 0) & (local < epr)
            at = position[received, local.clamp(0, epr - 1)]
            use = is_local & (at >= 0)
            weight = torch.where(use, w[:, j], torch.zeros_like(w[:, j]))
            total += weight[:, None] * packed[at.clamp(min=0)].float()
        out = self._last["out"]  # MORI writes the partials over the received rows
        out.copy_(total.to(out.dtype))
        return out

    # -- the rest of MORI's surface -------------------------------------------------
    @property
    def backend_name(self):
        """What runs the kernels: "epjit" and the target, e.g. "epjit (sm90)" (MORI
        names its own backend here; its scripts print it)."""
        return f"epjit ({self._op.target})"

    @property
    def capabilities(self):
        return dict(kernel_backend="epjit", target=self._op.target, combine_modes=("gather", "scatter"),
                    quant_types=("none", "fp8_direct_cast", "fp8_blockwise"), std_moe=True, replay=True,
                    graph_capture=True, scales=True, intranode=True, internode=True,
                    internode_kernels=("v2_ll",),
                    max_recv=self.max_recv)

    def reset(self):
        """Collective: clears every counter, flag and error on all ranks."""
        self._op.reset()
        self._last = self._latest = None

    def close(self):
        """Collective: frees the op's memory; later calls raise. Idempotent."""
        self._op.close()
        self.comm._untrack(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
