"""A DeepSeek-style MoE block whose token exchange runs through epjit, next to
the same block written the way most users write it by hand with
torch.distributed.all_to_all_single (NCCL).

The block: a softmax router picks the top-k experts of each token (weights
renormalized over the k), each expert is a SwiGLU MLP, and a token's output
is the weighted sum of its experts' outputs. Experts are spread evenly over
the ranks (expert e lives on rank e // experts_per_rank).

epjit's forward: dispatch (each token once per destination rank), the
standard-MoE layout (std_moe_pack: every received token once per local
expert, packed per expert), one SwiGLU per local expert over its packed rows,
each output row scaled by its routing weight, then std_moe_combine (summed per
received token, then over ranks, in f32, rounded once each).

    python examples/moe_layer.py                      # numpy, 2 host ranks (threads), small shape: checks
    torchrun --nproc-per-node 2 examples/moe_layer.py --torch [--tokens 128,4096] [--json FILE]
                                                      # CUDA GPUs: checks, then times both forwards

The numpy path is what make test runs (tests/python/test_moe_layer.py); the
torch path needs torch with CUDA and NCCL (it ran on 2 x H200, docs/PERFORMANCE.md).
"""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np

import epjit


class Shape:
    def __init__(self, world, hidden, ffn, experts, topk, max_tokens):
        self.world, self.hidden, self.ffn, self.experts, self.topk = world, hidden, ffn, experts, topk
        self.max_tokens = max_tokens
        self.experts_per_rank = experts // world


# ------------------------------------------------------------------ numpy path

def bf16(a):
    import ml_dtypes
    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16)


def swiglu(x, gate, up, down):
    """SwiGLU MLP in f32: (silu(x @ gate) * (x @ up)) @ down."""
    g = x @ gate
    return ((g / (1.0 + np.exp(-g))) * (x @ up)) @ down


def make_weights(shape, seed=0):
    """Every rank builds the same model (a fixed seed), then uses its experts."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(shape.hidden)
    router = rng.normal(0, scale, (shape.hidden, shape.experts)).astype(np.float32)
    experts = [(rng.normal(0, scale, (shape.hidden, shape.ffn)).astype(np.float32),
                rng.normal(0, scale, (shape.hidden, shape.ffn)).astype(np.float32),
                rng.normal(0, 1.0 / np.sqrt(shape.ffn), (shape.ffn, shape.hidden)).astype(np.float32))
               for _ in range(shape.experts)]
    return router, experts


def route(x, router, topk):
    """Softmax router: the top-k experts of each token and their weights, renormalized."""
    logits = x.astype(np.float32) @ router
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    indices = np.argsort(-probs, axis=1)[:, :topk].astype(np.int32)
    weights = np.take_along_axis(probs, indices, axis=1)
    return indices, (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


def forward_reference(x, router, experts, topk):
    """The block on one process, in f32: the answer both forwards approximate."""
    indices, weights = route(x, router, topk)
    xf = x.astype(np.float32)
    out = np.zeros_like(xf)
    for t in range(x.shape[0]):
        for j in range(topk):
            out[t] += weights[t, j] * swiglu(xf[t:t + 1], *experts[indices[t, j]])[0]
    return out


def forward_epjit_numpy(op, shape, rank, x, router, experts):
    indices, weights = route(x, router, shape.topk)
    recv, recv_weights, _, recv_indices, total = op.dispatch(x, weights, None, indices)
    packed, counts, sources = op.std_moe_pack()
    op.synchronize()
    expert_out = np.zeros(packed.shape, dtype=packed.dtype)
    for e in range(shape.experts_per_rank):
        n = int(counts[e])
        if n == 0:
            continue
        rows = np.asarray(sources[e, :n])
        y = swiglu(np.asarray(packed[e, :n]).astype(np.float32), *experts[rank * shape.experts_per_rank + e])
        # Each packed row scaled by its token's weight for this expert.
        slot = np.argmax(np.asarray(recv_indices[rows]) == rank * shape.experts_per_rank + e, axis=1)
        expert_out[e, :n] = bf16(y * np.asarray(recv_weights)[rows, slot][:, None])
    out, _ = op.std_moe_combine(expert_out)
    op.check()
    return np.asarray(out).astype(np.float32)


def config_for(shape, rank, target):
    return epjit.EpDispatchCombineConfig(
        rank=rank, world_size=shape.world, hidden_dim=shape.hidden, max_num_inp_token_per_rank=shape.max_tokens,
        num_experts_per_rank=shape.experts_per_rank, num_experts_per_token=shape.topk, data_type="bf16",
        enable_std_moe=True, target=target)


def check_numpy(shape, tokens, seed=1):
    """Host ranks on threads: epjit's forward against the f32 reference. Returns
    the largest error relative to the reference's largest magnitude, per rank."""
    router, experts = make_weights(shape)
    uid = epjit.Communicator.get_unique_id()
    errors, failures = [None] * shape.world, [None] * shape.world

    def rank_main(rank):
        try:
            comm = epjit.Communicator.init(shape.world, rank, uid, target="host")
            with epjit.EpDispatchCombineOp(config_for(shape, rank, "host"), comm) as op:
                x = bf16(np.random.default_rng(seed * 100 + rank).normal(0, 1, (tokens - rank, shape.hidden)))
                got = forward_epjit_numpy(op, shape, rank, x, router, experts)
                want = forward_reference(x, router, experts, shape.topk)
                errors[rank] = float(np.abs(got - want).max() / np.abs(want).max())
            comm.destroy()
        except Exception as error:  # reported below
            failures[rank] = f"rank {rank}: {type(error).__name__}: {error}"

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(shape.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(failures):
        raise RuntimeError("; ".join(f for f in failures if f))
    return errors


# ------------------------------------------------------------------ torch path

def torch_forwards(torch, dist, shape, rank, comm):
    """The block's two forwards on CUDA tensors, sharing router and experts."""
    device = torch.device("cuda", torch.cuda.current_device())
    # Made on the GPU (DeepSeek's experts are gigabytes): the router alike on
    # every rank, the experts each rank's own.
    shared = torch.Generator(device=device).manual_seed(0)
    own = torch.Generator(device=device).manual_seed(1 + rank)
    scale = shape.hidden ** -0.5
    router = torch.randn(shape.hidden, shape.experts, generator=shared, device=device) * scale
    epr = shape.experts_per_rank
    mine = range(rank * epr, (rank + 1) * epr)

    def weights_of(*dims, std):
        return (torch.randn(*dims, generator=own, device=device) * std).to(torch.bfloat16)

    gate = weights_of(epr, shape.hidden, shape.ffn, std=scale)
    up = weights_of(epr, shape.hidden, shape.ffn, std=scale)
    down = weights_of(epr, shape.ffn, shape.hidden, std=shape.ffn ** -0.5)

    def route_t(x):
        probs = torch.softmax(x.float() @ router, dim=1)
        w, idx = torch.topk(probs, shape.topk, dim=1)
        return idx.to(torch.int32), (w / w.sum(dim=1, keepdim=True)).float()

    def expert(e, rows):
        h = rows @ gate[e]
        return (torch.nn.functional.silu(h) * (rows @ up[e])) @ down[e]

    op = epjit.EpDispatchCombineOp(config_for(shape, rank, "sm90"), comm)
    buffers = {}

    def epjit_forward(x, timings):
        idx, w = route_t(x)
        t0 = torch.cuda.Event(enable_timing=True)
        t1, t2, t3 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0.record()
        recv, recv_w, _, recv_idx, total = op.dispatch(x, w, None, idx)
        packed, counts, sources = op.std_moe_pack()
        t1.record()
        # Experts write their rows in the packed layout; rows past an expert's
        # count are never read, so one buffer serves every call.
        if "expert_out" not in buffers:
            buffers["expert_out"] = torch.empty_like(packed)
        expert_out = buffers["expert_out"]
        host_counts = counts.tolist()  # the grouped GEMM of a real model reads counts on the device
        for e in range(epr):
            n = host_counts[e]
            if n:
                rows = sources[e, :n].long()
                slot = (recv_idx[rows] == mine[e]).int().argmax(dim=1)
                expert_out[e, :n] = (expert(e, packed[e, :n]) * recv_w[rows, slot][:, None]).to(torch.bfloat16)
        t2.record()
        out, _ = op.std_moe_combine(expert_out)
        t3.record()
        timings.append((t0, t1, t2, t3))
        return out

    def nccl_forward(x, timings):
        """By hand: sort by destination rank, exchange counts and rows, run the
        local experts, send the weighted outputs back, sum per token."""
        idx, w = route_t(x)
        t0 = torch.cuda.Event(enable_timing=True)
        t1, t2, t3 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0.record()
        flat_expert = idx.reshape(-1).long()
        order = torch.argsort(flat_expert // epr, stable=True)
        send_tokens = x[order // shape.topk]
        send_meta = torch.stack([flat_expert[order], order], dim=1)
        send_counts = torch.bincount(flat_expert // epr, minlength=shape.world)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        recv_tokens = x.new_empty(sum(rc), shape.hidden)
        recv_meta = send_meta.new_empty(sum(rc), 2)
        dist.all_to_all_single(recv_tokens, send_tokens, rc, sc)
        dist.all_to_all_single(recv_meta, send_meta, rc, sc)
        t1.record()
        outputs = torch.empty_like(recv_tokens)
        local = recv_meta[:, 0] - rank * epr
        for e in range(epr):
            hit = (local == e).nonzero().squeeze(1)
            if hit.numel():
                outputs[hit] = expert(e, recv_tokens[hit]).to(torch.bfloat16)
        t2.record()
        back = torch.empty_like(send_tokens)
        dist.all_to_all_single(back, outputs, sc, rc)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        out.index_add_(0, order // shape.topk, back.float() * w.reshape(-1)[order][:, None])
        t3.record()
        timings.append((t0, t1, t2, t3))
        return out.to(torch.bfloat16)

    return op, epjit_forward, nccl_forward


def run_torch(args):
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    tokens_list = [int(t) for t in args.tokens.split(",")]
    shape = Shape(world, args.hidden, args.ffn, args.experts, args.topk, max(tokens_list))
    comm = epjit.Communicator.from_process_group(target="sm90", device_ordinal=torch.cuda.current_device())
    op, epjit_forward, nccl_forward = torch_forwards(torch, dist, shape, rank, comm)
    records = []
    for tokens in tokens_list:
        g = torch.Generator(device="cpu").manual_seed(1000 + rank)
        x = torch.randn(tokens, shape.hidden, generator=g).to("cuda", torch.bfloat16)
        ours, theirs = epjit_forward(x, []), nccl_forward(x, [])
        torch.cuda.synchronize()
        error = float((ours.float() - theirs.float()).abs().max() / theirs.float().abs().max())
        times = {}
        for name, forward in (("epjit", epjit_forward), ("nccl", nccl_forward)):
            timings = []
            for i in range(args.warmup + args.iters):
                dist.barrier()
                forward(x, timings if i >= args.warmup else [])
            torch.cuda.synchronize()
            layer = sum(a.elapsed_time(d) for a, _, _, d in timings) / len(timings) * 1000
            comm_us = sum(a.elapsed_time(b) + c.elapsed_time(d) for a, b, c, d in timings) / len(timings) * 1000
            times[name] = (layer, comm_us)
        record = {"tokens_per_rank": tokens, "max_rel_error_vs_nccl": error,
                  "epjit_layer_us": times["epjit"][0], "epjit_comm_us": times["epjit"][1],
                  "nccl_layer_us": times["nccl"][0], "nccl_comm_us": times["nccl"][1]}
        records.append(record)
        if rank == 0:
            print(json.dumps(record))
    op.close()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": vars(args), "world": world, "points": records}, f, indent=1)
    comm.destroy()
    dist.destroy_process_group()
    return 0 if all(r["max_rel_error_vs_nccl"] < args.tolerance for r in records) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", action="store_true", help="CUDA GPUs under torchrun, against NCCL")
    parser.add_argument("--tokens", default="128,4096")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest error relative to the output's range")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.torch:
        return run_torch(args)
    shape = Shape(world=2, hidden=64, ffn=96, experts=8, topk=3, max_tokens=13)
    errors = check_numpy(shape, tokens=13)
    print(f"numpy, 2 host ranks: epjit's MoE block vs the f32 reference, largest relative error {max(errors):.2e}")
    return 0 if max(errors) < args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
