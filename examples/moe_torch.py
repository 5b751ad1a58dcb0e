"""The torch half of examples/moe_layer.py: a DeepSeek-style MoE layer twice,
with the same router and the same grouped-GEMM experts, differing only in how
tokens reach the experts and come back.

- EpjitLayer: epjit's dispatch, the standard-MoE layout (std_moe_pack: rows
  packed per local expert, counts on the device), the rows made contiguous
  per expert for the grouped GEMM, each output row scaled by its routing
  weight and put back in the layout, then std_moe_combine. Nothing reads a
  count on the host, so the whole layer is one CUDA graph.
- NcclLayer: the layer as it is written by hand: (token, expert) pairs sorted
  by expert, counts exchanged and read on the host, rows and expert ids
  through all_to_all_single, received rows sorted by local expert, the same
  grouped GEMM, rows back through all_to_all_single, weighted sum per token.
- TwoBatchLayer: epjit's layer over two micro-batches, each on its own op:
  the exchanges run on a communication stream through the split calls
  (dispatch_send / dispatch_recv, std_moe_combine_send / combine_recv) while
  the other micro-batch's experts run on the caller's stream.

Every function here takes torch as its first argument or from a layer, so the
module imports without torch (the numpy path of moe_layer.py needs none).
"""
import contextlib


def grouped_mm(torch, rows, weights, offs):
    """rows [P, K], grouped by expert (group g holds rows offs[g-1] to offs[g]),
    times weights [G, K, N]: [P, N]; rows past offs[-1] are left undefined.
    torch._grouped_mm where torch has it (sm90 and later, and the CPU); else one
    matmul per expert, which reads offs on the host (it synchronizes, and a
    graph cannot hold it)."""
    if hasattr(torch, "_grouped_mm") and (rows.device.type != "cuda"
                                         or torch.cuda.get_device_capability(rows.device) >= (9, 0)):
        return torch._grouped_mm(rows, weights, offs=offs)
    out = rows.new_empty(rows.shape[0], weights.shape[2])
    start = 0
    for group, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = rows[start:end] @ weights[group]
        start = end
    return out


class Experts:
    """This rank's SwiGLU experts as two grouped GEMMs: gate and up fused into
    [experts, hidden, 2 ffn], then down [experts, ffn, hidden]; bf16."""

    def __init__(self, torch, shape, rank, device):
        self.torch, self.ffn = torch, shape.ffn
        own = torch.Generator(device=device).manual_seed(1 + rank)
        epr, hidden, ffn = shape.experts_per_rank, shape.hidden, shape.ffn

        def weights(*dims, std):
            return (torch.randn(*dims, generator=own, device=device) * std).to(torch.bfloat16)

        self.gate_up = weights(epr, hidden, 2 * ffn, std=hidden ** -0.5)
        self.down = weights(epr, ffn, hidden, std=ffn ** -0.5)

    def __call__(self, rows, offs):
        torch = self.torch
        h = grouped_mm(torch, rows, self.gate_up, offs)
        act = torch.nn.functional.silu(h[:, :self.ffn]) * h[:, self.ffn:]
        return grouped_mm(torch, act, self.down, offs)


class Router:
    """Softmax over every expert, top-k, weights renormalized over the k (the
    same on every rank: one seed)."""

    def __init__(self, torch, shape, device):
        self.torch, self.topk = torch, shape.topk
        shared = torch.Generator(device=device).manual_seed(0)
        self.weight = torch.randn(shape.hidden, shape.experts, generator=shared, device=device) * shape.hidden ** -0.5

    def __call__(self, x):
        torch = self.torch
        probs = torch.softmax(x.float() @ self.weight, dim=1)
        w, idx = torch.topk(probs, self.topk, dim=1)
        return idx.to(torch.int32), w / w.sum(dim=1, keepdim=True)


class Marks:
    """Events between a forward's phases (CUDA), or nothing (CPU)."""
    def __init__(self, torch, names, on):
        self.names, self.events = names, []
        self.on = on and torch.cuda.is_available()
        self.torch = torch

    def __call__(self):
        if self.on:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)

    def phases_ms(self):
        """{phase: ms} of the last forward, once its events have completed."""
        last = self.events[-(len(self.names) + 1):]
        return {name: a.elapsed_time(b) for name, a, b in zip(self.names, last, last[1:])}


EPJIT_PHASES = ("route", "dispatch", "layout", "experts", "unlayout", "combine")
NCCL_PHASES = EPJIT_PHASES


class EpjitLayer:
    """The layer through one epjit op built for at most `tokens` rows per rank
    (every rank passes at most that many: the bound of the rows the experts
    can receive, world * tokens * top-k, sizes the grouped GEMM)."""

    def __init__(self, torch, shape, rank, op, router, experts, tokens):
        self.torch, self.shape, self.op, self.router, self.experts = torch, shape, op, router, experts
        device = router.weight.device
        epr = shape.experts_per_rank
        self.per_expert = shape.world * shape.max_tokens  # std_moe_pack's rows per expert
        self.bound = min(shape.world * tokens * shape.topk, epr * self.per_expert)
        self.positions = torch.arange(self.bound, dtype=torch.int32, device=device)
        # The packed layout, plus one row where the positions past the last
        # expert's rows land (their results are never read).
        self.expert_out = torch.zeros(epr * self.per_expert + 1, shape.hidden, dtype=torch.bfloat16, device=device)
        self.first_expert = rank * epr
        self.last = None

    def dispatch(self, x, idx, w, split=False):
        if split:
            self.last = self.op.dispatch_send(x, w, None, idx)
            self.op.dispatch_recv()
        else:
            self.last = self.op.dispatch(x, w, None, idx)
        self.packed = self.op.std_moe_pack()

    def run_experts(self, marks=None):
        """Compact the packed rows per expert, the grouped GEMM, each output row
        times its routing weight, back into the packed layout."""
        torch, shape = self.torch, self.shape
        _, recv_w, _, recv_idx, _ = self.last
        packed, counts, sources = self.packed
        epr = shape.experts_per_rank
        offs = counts.cumsum(0, dtype=torch.int32)
        starts = offs - counts
        group = torch.searchsorted(offs, self.positions, right=True)
        valid = group < epr
        expert = group.clamp_(max=epr - 1)
        within = self.positions - starts[expert]
        # Positions past the last row read some row in bounds; their results go nowhere.
        src = torch.add(within, expert, alpha=self.per_expert).clamp_(0, epr * self.per_expert - 1)
        rows = packed.view(-1, shape.hidden).index_select(0, src)
        received = sources.view(-1).index_select(0, src).clamp_(0, recv_idx.shape[0] - 1)
        hit = recv_idx.index_select(0, received) == (expert + self.first_expert)[:, None]
        weight = (recv_w.index_select(0, received) * hit).sum(dim=1)
        marks and marks()
        y = self.experts(rows, offs)
        marks and marks()
        y = (y.float() * weight[:, None]).to(torch.bfloat16)
        dst = torch.where(valid, src, self.expert_out.shape[0] - 1)
        self.expert_out.index_copy_(0, dst, y)
        self.gemm_inputs = (rows, offs)

    def expert_outputs(self):
        return self.expert_out[:-1].view(self.shape.experts_per_rank, self.per_expert, self.shape.hidden)

    def combine(self, split=False):
        if split:
            self.op.std_moe_combine_send(self.expert_outputs())
            out, _ = self.op.combine_recv()
        else:
            out, _ = self.op.std_moe_combine(self.expert_outputs())
        return out

    def forward(self, x, marks=None):
        marks and marks()
        idx, w = self.router(x)
        marks and marks()
        self.dispatch(x, idx, w)
        marks and marks()
        self.run_experts(marks)
        marks and marks()
        out = self.combine()
        marks and marks()
        return out


class NcclLayer:
    """The layer written by hand over torch.distributed (NCCL on GPUs)."""

    def __init__(self, torch, dist, shape, rank, router, experts):
        self.torch, self.dist, self.shape, self.router, self.experts = torch, dist, shape, router, experts
        self.first_expert = rank * shape.experts_per_rank
        # Ranks sharing a GPU exchange through gloo (NCCL takes one rank per
        # GPU), staged through host memory: a check of results, not of speed.
        self.staged = dist.get_backend() == "gloo"

    def all_to_all(self, out, inp, out_splits=None, in_splits=None):
        if self.staged and inp.is_cuda:
            host = out.cpu()
            self.dist.all_to_all_single(host, inp.cpu(), out_splits, in_splits)
            out.copy_(host)
        else:
            self.dist.all_to_all_single(out, inp, out_splits, in_splits)

    def forward(self, x, marks=None):
        torch, shape = self.torch, self.shape
        epr, topk = shape.experts_per_rank, shape.topk
        marks and marks()
        idx, w = self.router(x)
        marks and marks()
        flat = idx.reshape(-1).long()
        order = torch.argsort(flat, stable=True)  # by expert, so by destination rank
        token_of = order // topk
        send_tokens = x.index_select(0, token_of)
        send_expert = flat[order].int()
        send_counts = torch.bincount(flat // epr, minlength=shape.world)
        recv_counts = torch.empty_like(send_counts)
        self.all_to_all(recv_counts, send_counts)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        recv_tokens = x.new_empty(sum(rc), shape.hidden)
        recv_expert = send_expert.new_empty(sum(rc))
        self.all_to_all(recv_tokens, send_tokens, rc, sc)
        self.all_to_all(recv_expert, send_expert, rc, sc)
        marks and marks()
        local = (recv_expert - self.first_expert).long()
        perm = torch.argsort(local, stable=True)
        rows = recv_tokens.index_select(0, perm)
        offs = torch.bincount(local, minlength=epr).cumsum(0, dtype=torch.int32)
        marks and marks()
        y = self.experts(rows, offs)
        marks and marks()
        outputs = torch.empty_like(y)
        outputs.index_copy_(0, perm, y)
        marks and marks()
        back = torch.empty_like(send_tokens)
        self.all_to_all(back, outputs, sc, rc)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        out.index_add_(0, token_of, back.float() * w.reshape(-1)[order][:, None])
        marks and marks()
        return out.to(torch.bfloat16)


class TwoBatchLayer:
    """epjit's layer over two micro-batches (the first half of the rows and
    the rest), one op each. The exchanges run on `comm_stream` through the
    split calls; micro-batch 0's experts overlap micro-batch 1's dispatch, and
    micro-batch 1's experts overlap micro-batch 0's combine."""

    def __init__(self, torch, layers, comm_stream):
        self.torch, self.layers, self.comm = torch, layers, comm_stream

    def sequential(self, x):
        half = (x.shape[0] + 1) // 2
        return self.torch.cat([self.layers[0].forward(x[:half]), self.layers[1].forward(x[half:])])

    def overlapped(self, x):
        torch, comm = self.torch, self.comm
        a, b = self.layers
        half = (x.shape[0] + 1) // 2
        x0, x1 = x[:half], x[half:]
        r0, r1 = a.router(x0), b.router(x1)
        compute = comm and torch.cuda.current_stream()
        comm and comm.wait_stream(compute)
        with self._on(comm):
            a.dispatch(x0, *r0, split=True)
            a_arrived = self._event()
            b.dispatch(x1, *r1, split=True)  # while micro-batch 0's experts run
            b_arrived = self._event()
        self._wait(compute, a_arrived)
        a.run_experts()
        self._wait(comm, self._event())
        with self._on(comm):
            out0 = a.combine(split=True)  # while micro-batch 1's experts run
        self._wait(compute, b_arrived)
        b.run_experts()
        self._wait(comm, self._event())
        with self._on(comm):
            out1 = b.combine(split=True)
        comm and compute.wait_stream(comm)
        return torch.cat([out0, out1])

    # Without CUDA (host ranks, CPU tensors) the schedule runs in its order on
    # the one thread: the split calls' sequence, checked where no GPU is.
    def _on(self, stream):
        return self.torch.cuda.stream(stream) if stream else contextlib.nullcontext()

    def _event(self):
        if not self.comm:
            return None
        event = self.torch.cuda.Event()
        event.record()
        return event

    def _wait(self, stream, event):
        if stream:
            stream.wait_event(event)


def capture(torch, fn, *args):
    """fn(*args) once eagerly on a side stream (torch's advice before a capture),
    then captured; returns (graph, its output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    torch.cuda.synchronize()
    return graph, out


def time_ms(torch, fn, iters, barrier=None):
    """Mean ms of fn() over `iters` back-to-back calls, after two more."""
    for _ in range(2):
        fn()
    if barrier:
        barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def mean_phases(torch, forward, x, names, iters, barrier=None):
    """Each phase's mean ms over `iters` eager forwards (events between phases)."""
    totals = dict.fromkeys(names, 0.0)
    for i in range(iters + 2):
        if barrier:
            barrier()
        marks = Marks(torch, names, on=i >= 2)
        forward(x, marks)
        torch.cuda.synchronize()
        if i >= 2:
            for name, ms in marks.phases_ms().items():
                totals[name] += ms / iters
    return totals
