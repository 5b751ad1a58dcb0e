"""DeepEP's Buffer and epjit's (epjit.deep_ep), the same workload through each,
every result checked against one reference before the path is timed: the
Python half of the peer comparison (benchmarks/peers/README.md; the `peers`
GPU check adds epjit's native op, NCCL and the SM-write ceiling, measured by
epjit-bench --baselines in the same run on the same GPUs).

    torchrun --nproc-per-node WORLD benchmarks/peers/deep_ep_paths.py --json OUT.json
        [--tokens 1,128,512,4096,8192] [--ll-tokens 1,128] [--routing uniform,skewed]
        [--dtype bf16,fp8] [--libs deepep,epjit] [--iters 20] [--warmup 5]
    python benchmarks/peers/deep_ep_paths.py --host --world 2 ...   host ranks (gloo, CPU
        tensors, epjit only): a check of the script where no GPU is, not a number.

Shape: hidden 7168, top-8, 256 experts (DeepSeek-V3). Every rank rebuilds every
rank's inputs from seeds, so each checks what it received:
  normal mode: get_dispatch_layout, dispatch (bf16, or fp8 with per-128 float
    scales as (x, scales)) and combine of the received rows (identity experts).
    recv_x is every source rank's tokens that name an expert here, by source rank
    in token order (DeepEP's order), bit for bit (fp8: codes and scales); recv_topk_idx
    local ids, -1 elsewhere; combined = x times the ranks the token went to.
  low-latency mode (--ll-tokens): low_latency_dispatch (bf16, or use_fp8 with
    float scales), identity experts, low_latency_combine with the top-k weights.
    Each local expert's count, and its rows as a multiset, bit for bit (fp8: the
    codes dequantized); combined = DeepEP's bits (fused multiply-adds from +0.0 in
    top-k order, rounded once), exactly for bf16, within a bf16 step for fp8.
Timing: CUDA events around each call, the median of --iters calls after --warmup,
the largest over ranks. Bandwidth per rank two ways, since libraries count
differently: every row a call moves (local ones too), and only rows that cross to
another rank. Normal mode moves a row per (token, destination rank); low latency a
row per (token, expert), DeepEP's message count.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

HIDDEN, TOPK, EXPERTS = 7168, 8, 256


def inputs(world, rank, tokens, routing, seed=0):
    """Rank `rank`'s tokens: x bf16, topk_idx int64 (distinct experts per token),
    weights f32. skewed: expert e drawn with weight 1 / (e + 1) (the first ranks' experts hot)."""
    g = torch.Generator().manual_seed(((seed * 131 + tokens) * 64 + rank) * 2 + (routing == "skewed"))
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    w = torch.rand(tokens, TOPK, generator=g)
    if routing == "skewed":
        p = 1.0 / torch.arange(1, EXPERTS + 1, dtype=torch.float64)
        idx = torch.multinomial(p.expand(max(tokens, 1), EXPERTS), TOPK, replacement=False, generator=g)[:tokens]
    else:
        idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(tokens)]) if tokens else \
            torch.empty(0, TOPK, dtype=torch.long)
    return x, idx.long(), w


def per_128_fp8(x):
    """DeepEP's per-128 cast (its low-latency dispatch's, modelled in float32 as
    tests/python/test_deep_ep.py does; the normal mode's fp8 input uses it too):
    amax floored at 1e-4, codes x * (448 / amax) (a division), scales amax * (1 / 448)."""
    blocks = x.float().view(x.shape[0], -1, 128)
    amax = blocks.abs().amax(dim=2).clamp(min=1e-4)
    factor = torch.full_like(amax, 448) / amax
    codes = (blocks * factor[..., None]).view(x.shape).to(torch.float8_e4m3fn)
    return codes, amax * torch.tensor(1 / 448, dtype=torch.float32)


def dequantized(codes, scales):
    """bf16 rows of per-128 codes [..., hidden] and their scales [..., hidden / 128]."""
    shape = codes.shape
    return (codes.float().view(*shape[:-1], -1, 128) * scales.float()[..., None]).view(shape).to(torch.bfloat16)


def ranks_of(idx, world):
    """[tokens, world] bool: which ranks a token's experts live on."""
    per_rank = EXPERTS // world
    hit = torch.zeros(idx.shape[0], world, dtype=torch.bool)
    for k in range(idx.shape[1]):
        live = idx[:, k] >= 0
        hit[live, (idx[live, k] // per_rank)] = True
    return hit


class Timer:
    """Median microseconds of calls, each run from an idle stream: CUDA events on GPUs."""

    def __init__(self, gpu):
        self.gpu = gpu

    def _mark(self):
        if self.gpu:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _between(self, a, b):
        return a.elapsed_time(b) * 1e3 if self.gpu else (b - a) * 1e6

    def __call__(self, fn, iters, warmup):
        return self.legs([fn], iters, warmup)[0]

    def legs(self, calls, iters, warmup):
        """Each call of `calls` in turn, per round (the next takes what the one before
        returns); the median time of each leg, an event between legs."""
        for _ in range(warmup):
            carried = None
            for call in calls:
                carried = call(carried)
        samples = [[] for _ in calls]
        for _ in range(iters):
            if self.gpu:
                torch.cuda.synchronize()
            marks, carried = [self._mark()], None
            for call in calls:
                carried = call(carried)
                marks.append(self._mark())
            if self.gpu:
                marks[-1].synchronize()
            for leg in range(len(calls)):
                samples[leg].append(self._between(marks[leg], marks[leg + 1]))
        return [statistics.median(leg) for leg in samples]


def largest(value, device):
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def everyone_passed(failures, device):
    t = torch.tensor([1.0 if failures else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() == 0.0


class Case:
    """One (mode, dtype, routing, tokens) workload on this rank, with what it must give."""

    def __init__(self, world, rank, tokens, routing, dtype, device):
        self.world, self.rank, self.tokens, self.dtype, self.device = world, rank, tokens, dtype, device
        self.all = [inputs(world, r, tokens, routing) for r in range(world)]
        x, idx, w = self.all[rank]
        self.x, self.idx, self.w = x.to(device), idx.to(device), w.to(device)
        self.fp8 = per_128_fp8(x) if dtype == "fp8" else None
        per_rank = EXPERTS // world
        # Normal mode: the rows each source sends here, by source in token order.
        rows, codes, scales, local_idx = [], [], [], []
        self.rows_out = 0  # rows this rank sends (token, destination rank), local ones included
        self.rows_remote = 0
        for source, (sx, sidx, _) in enumerate(self.all):
            hit = ranks_of(sidx, world)
            mine = hit[:, rank]
            rows.append(sx[mine])
            if dtype == "fp8":
                c, s = per_128_fp8(sx)
                codes.append(c[mine])
                scales.append(s[mine])
            local = sidx[mine] - rank * per_rank
            local_idx.append(torch.where((local >= 0) & (local < per_rank), local, -1))
            if source == rank:
                self.rows_out = int(hit.sum())
                self.rows_remote = int(hit.sum()) - int(mine.sum())
                self.distinct_ranks = hit.sum(1)
        self.want_rows = torch.cat(rows)
        self.want_codes = torch.cat(codes) if codes else None
        self.want_scales = torch.cat(scales) if scales else None
        self.want_local_idx = torch.cat(local_idx)
        # Low latency: each local expert's rows as a multiset (row bytes, sorted).
        self.entries_out = int((idx >= 0).sum())
        self.entries_remote = int(((idx >= 0) & (idx // per_rank != rank)).sum())

    def row_bytes(self):
        return HIDDEN + HIDDEN // 128 * 4 if self.dtype == "fp8" else HIDDEN * 2

    def dispatch_input(self):
        if self.fp8 is None:
            return self.x
        return self.fp8[0].to(self.device), self.fp8[1].to(self.device)

    def combine_reference(self):
        """Identity experts summed over the ranks a token reached (DeepEP's normal combine),
        from the rows as received (fp8: dequantized)."""
        x = self.x.cpu() if self.fp8 is None else dequantized(*self.fp8)
        return (x.float() * self.distinct_ranks[:, None].float()).to(torch.bfloat16)

    def ll_want(self):
        """{local expert: its rows} (fp8: DeepEP's cast, dequantized)."""
        per_rank = EXPERTS // self.world
        want = {}
        for sx, sidx, _ in self.all:
            if self.dtype == "fp8":
                sx = dequantized(*per_128_fp8(sx))
            for k in range(TOPK):
                e = sidx[:, k]
                here = (e >= 0) & (e // per_rank == self.rank)
                for t in here.nonzero().flatten().tolist():
                    want.setdefault(int(e[t]) - self.rank * per_rank, []).append(sx[t])
        return want

    def ll_combine_reference(self, x):
        acc = torch.zeros(x.shape, dtype=torch.float32)
        idx, w = self.idx.cpu(), self.w.cpu()
        for k in range(TOPK):
            live = idx[:, k] >= 0
            fused = (acc.double() + x.float().double() * w[:, k].double()[:, None]).float()
            acc = torch.where(live[:, None], fused, acc)
        return acc.to(torch.bfloat16)


def check_normal(case, got, failures):
    recv, recv_idx, _, _, handle, _ = got
    if case.dtype == "fp8":
        codes, scales = recv
        if not torch.equal(codes.cpu().view(torch.uint8), case.want_codes.view(torch.uint8)):
            failures.append("normal fp8: received codes differ from the sources' rows in source order")
        if not torch.equal(scales.cpu(), case.want_scales):
            failures.append("normal fp8: received scales differ")
    elif not torch.equal(recv.cpu().view(torch.int16), case.want_rows.view(torch.int16)):
        failures.append(f"normal bf16: received rows differ ({tuple(recv.shape)} against "
                        f"{tuple(case.want_rows.shape)}, in source order)")
    if not torch.equal(recv_idx.cpu(), case.want_local_idx):
        failures.append("normal: recv_topk_idx differs (local ids, -1 elsewhere)")


def normal_rows_bf16(case, recv):
    return recv if case.dtype != "fp8" else dequantized(*recv)


def run_normal(lib, buffer, case, timer, args, failures):
    layout = buffer.get_dispatch_layout(case.idx, EXPERTS)
    per_rank_counts, _, per_expert, in_rank, _ = layout

    def dispatch():
        return buffer.dispatch(case.dispatch_input(), num_tokens_per_rank=per_rank_counts,
                               is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                               topk_idx=case.idx, topk_weights=case.w)

    got = dispatch()
    check_normal(case, got, failures)
    rows = normal_rows_bf16(case, got[0]).contiguous()
    combined, _, _ = buffer.combine(rows, got[4])
    if not torch.equal(combined.cpu().view(torch.int16), case.combine_reference().view(torch.int16)):
        failures.append("normal: combine of the received rows is not x times the ranks it reached")
    if not everyone_passed(failures, case.device):
        return None
    # A combine answers the dispatch before it (epjit's layer takes a handle's
    # combine once), so each round times the layout, the dispatch and its combine.
    layout_us, dispatch_us, combine_us = timer.legs(
        [lambda _: buffer.get_dispatch_layout(case.idx, EXPERTS), lambda _: dispatch(),
         lambda got: buffer.combine(rows, got[4])], args.iters, args.warmup)
    return dict(layout_us=layout_us, dispatch_us=dispatch_us, combine_us=combine_us,
                rows_out=case.rows_out, rows_remote=case.rows_remote)


def run_low_latency(lib, buffer, case, timer, args, failures):
    use_fp8 = case.dtype == "fp8"
    max_tokens = max(args.ll_token_list)

    def dispatch():
        return buffer.low_latency_dispatch(case.x, case.idx, max_tokens, EXPERTS, use_fp8=use_fp8)

    recv, counts, handle, _, _ = dispatch()
    rows = dequantized(*recv) if use_fp8 else recv  # fp8 scales: [experts, rows, hidden / 128] views
    want = case.ll_want()
    counts_cpu = counts.cpu().tolist()
    for expert, n in enumerate(counts_cpu):
        rows_here = want.get(expert, [])
        if n != len(rows_here):
            failures.append(f"low latency: expert {expert} received {n} rows, expected {len(rows_here)}")
            break
        if not n:
            continue
        got_set = sorted(bytes(r.view(torch.int16).numpy()) for r in rows[expert, :n].cpu())
        want_set = sorted(bytes(r.view(torch.int16).numpy()) for r in rows_here)
        if got_set != want_set:
            failures.append(f"low latency: expert {expert}'s rows differ (as a multiset)")
            break
    combined, _, _ = buffer.low_latency_combine(rows, case.idx, case.w, handle)
    sent = case.x.cpu() if not use_fp8 else dequantized(*per_128_fp8(case.x.cpu()))
    if not torch.equal(combined.cpu().view(torch.int16), case.ll_combine_reference(sent).view(torch.int16)):
        failures.append(f"low latency {case.dtype}: combine differs from DeepEP's fused multiply-adds in top-k "
                        "order (of the rows as sent: fp8 dequantized)")
    if not everyone_passed(failures, case.device):
        return None
    dispatch_us, combine_us = timer.legs(
        [lambda _: dispatch(), lambda got: buffer.low_latency_combine(rows, case.idx, case.w, got[2])],
        args.iters, args.warmup)
    return dict(dispatch_us=dispatch_us, combine_us=combine_us, rows_out=case.entries_out,
                rows_remote=case.entries_remote)


def libraries(names, host):
    """{name: the module with Buffer, or the reason it is absent}."""
    found = {}
    for name in names:
        if name == "epjit":
            import epjit.deep_ep
            found[name] = epjit.deep_ep
        elif name == "deepep":
            if host:
                found[name] = "DeepEP runs on NVIDIA GPUs only"
                continue
            try:
                import deep_ep
                if deep_ep.__name__ != "deep_ep" or getattr(deep_ep, "__file__", "").find("epjit") >= 0:
                    raise ImportError("`deep_ep` is epjit's layer (epjit.deep_ep.install() ran)")
                found[name] = deep_ep
            except Exception as error:  # the build's absence is a recorded row, not a crash
                found[name] = f"{type(error).__name__}: {error}"
    return found


def make_buffer(lib, name, mode, world, max_tokens, host):
    group = dist.group.WORLD
    extra = dict(device="host") if host and name == "epjit" else {}
    if mode == "normal":
        # Megatron-LM's sizing (fused_a2a.py): the larger of the two configs' hints.
        nvl = max(config.get_nvl_buffer_size_hint(HIDDEN * 2, world)
                  for config in (lib.Buffer.get_dispatch_config(world), lib.Buffer.get_combine_config(world)))
        if name == "epjit":
            extra["max_tokens_per_rank"] = max_tokens
        return lib.Buffer(group, nvl, 0, **extra)
    rdma = lib.Buffer.get_low_latency_rdma_size_hint(max_tokens, HIDDEN, world, EXPERTS)
    return lib.Buffer(group, 0, rdma, low_latency_mode=True, num_qps_per_rank=EXPERTS // world, **extra)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1,128,512,4096,8192")
    parser.add_argument("--ll-tokens", default="1,128")
    parser.add_argument("--routing", default="uniform,skewed")
    parser.add_argument("--dtype", default="bf16,fp8")
    parser.add_argument("--libs", default="deepep,epjit")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--host", action="store_true")
    parser.add_argument("--world", type=int, default=1, help="with --host: ranks spawned here")
    args = parser.parse_args()
    if args.host and "RANK" not in os.environ:
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=host_rank, args=(args, r)) for r in range(args.world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        sys.exit(max(p.exitcode for p in procs))
    run(args)


def host_rank(args, rank):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT", "29571"))
    run(args)


def run(args):
    gpu = not args.host
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if gpu else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    device = "cuda" if gpu else "cpu"
    args.ll_token_list = [int(t) for t in args.ll_tokens.split(",") if t]
    timer = Timer(gpu)
    records = []
    libs = libraries(args.libs.split(","), args.host)
    for name, lib in libs.items():
        if isinstance(lib, str):
            records.append(dict(lib=name, skipped=lib))
            continue
        for mode, token_list in (("normal", [int(t) for t in args.tokens.split(",")]),
                                 ("low_latency", args.ll_token_list)):
            if not token_list:
                continue
            buffer = make_buffer(lib, name, mode, world, max(token_list), args.host)
            for dtype in args.dtype.split(","):
                for routing in args.routing.split(","):
                    for tokens in token_list:
                        case = Case(world, rank, tokens, routing, dtype, device)
                        failures = []
                        run_mode = run_normal if mode == "normal" else run_low_latency
                        try:
                            got = run_mode(name, buffer, case, timer, args, failures)
                        except Exception as error:  # a refused form is a recorded row
                            failures.append(f"{type(error).__name__}: {error}")
                            got = None
                            everyone_passed(failures, device)
                        record = dict(lib=name, mode=mode, dtype=dtype, routing=routing, tokens=tokens, world=world,
                                      row_bytes=case.row_bytes(), check="passed" if got else "; ".join(failures) or
                                      "failed on another rank")
                        if got:
                            for key in [k for k in got if k.endswith("_us")]:
                                got[key] = largest(got[key], device)
                            record.update(got)
                        records.append(record)
                        if rank == 0:
                            print(json.dumps(record), flush=True)
            if hasattr(buffer, "destroy") and getattr(buffer, "explicitly_destroy", False):
                buffer.destroy()
            del buffer
    if rank == 0 and args.json:
        meta = dict(tool="deep_ep_paths.py", torch=torch.__version__, world=world,
                    gpu=torch.cuda.get_device_name() if gpu else "host ranks", shape=dict(hidden=HIDDEN, topk=TOPK,
                                                                                          experts=EXPERTS))
        with open(args.json, "w") as out:
            json.dump(dict(meta=meta, records=records), out, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
