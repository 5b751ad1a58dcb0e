"""A DeepSeek-style MoE block whose token exchange runs through epjit, next to
the same block written the way most users write it by hand with
torch.distributed.all_to_all_single (NCCL).

The block: a softmax router picks the top-k experts of each token (weights
renormalized over the k), each expert is a SwiGLU MLP, and a token's output
is the weighted sum of its experts' outputs. Experts are spread evenly over
the ranks (expert e lives on rank e // experts_per_rank).

epjit's forward: dispatch (each token once per destination rank), the
standard-MoE layout (std_moe_pack: every received token once per local
expert, packed per expert), the experts over their packed rows, each output
row scaled by its routing weight, then std_moe_combine (summed per received
token, then over ranks, in f32, rounded once each).

    python examples/moe_layer.py        # numpy, 2 host ranks (threads), small shape: checks
    torchrun --nproc-per-node N examples/moe_layer.py --torch [--tokens 1,128,4096] [--json FILE]
                                        # CUDA GPUs (EP N): checks, then times both layers
    torchrun --nproc-per-node 2 examples/moe_layer.py --torch --device cpu --hidden 64 --ffn 96 --experts 8 --topk 3
                                        # host ranks and gloo: the torch layers' checks, no GPU

With torch the experts are grouped GEMMs, the same in both layers, and epjit's
layer runs as one CUDA graph, with a two-micro-batch variant that overlaps
one batch's exchange with the other's experts (moe_torch.py says how). The
numpy path is what make test runs (tests/python/test_moe_layer.py); the
results of the torch path are in docs/PERFORMANCE.md.
"""
import argparse
import json
import os
import sys
import threading

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

def run_torch(args):
    """Under torchrun: for each token count, both layers' outputs compared, then
    (CUDA) each timed: epjit's layer as one CUDA graph, the NCCL layer eagerly
    (it reads counts on the host), each phase, the grouped GEMM alone on the
    same rows, and the two-micro-batch layer with and without overlap."""
    import torch
    import torch.distributed as dist

    import moe_torch as mt
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dist.init_process_group(args.dist_backend or ("nccl" if cuda else "gloo"))
    target = args.target or ("sm90" if cuda else "host")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    comm = epjit.Communicator.from_process_group(target=target,
                                                 device_ordinal=torch.cuda.current_device() if cuda else -1)
    base = Shape(world, args.hidden, args.ffn, args.experts, args.topk, 1)
    router, experts = mt.Router(torch, base, device), mt.Experts(torch, base, rank, device)
    barrier = dist.barrier
    comm_stream = torch.cuda.Stream(priority=-1) if cuda else None
    records, failures = [], []

    def new_layer(tokens):
        shape = Shape(world, args.hidden, args.ffn, args.experts, args.topk, tokens)
        op = epjit.EpDispatchCombineOp(config_for(shape, rank, target), comm)
        return op, mt.EpjitLayer(torch, shape, rank, op, router, experts, tokens)

    def compare(name, got, want, exact):
        error = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1e-30))
        if (error != 0.0) if exact else not error < args.tolerance:
            failures.append(f"{name}: largest relative difference {error:.3e}")
        return error

    for tokens in [int(t) for t in args.tokens.split(",")]:
        g = torch.Generator(device="cpu").manual_seed(1000 + rank)
        x = torch.randn(tokens, args.hidden, generator=g).to(device, torch.bfloat16)
        record = {"tokens_per_rank": tokens}
        op, layer = new_layer(tokens)
        nccl = mt.NcclLayer(torch, dist, layer.shape, rank, router, experts)
        ours = layer.forward(x).clone()
        theirs = nccl.forward(x)
        record["rel_error_vs_nccl"] = compare(f"{tokens} tokens: epjit vs nccl", ours, theirs, exact=False)
        if cuda:
            graph, graph_out = mt.capture(torch, layer.forward, x)
            graph.replay()
            record["graph_equals_eager"] = compare(f"{tokens} tokens: graph vs eager", graph_out, ours, exact=True) == 0
            rows, offs = (t.clone() for t in layer.gemm_inputs)
            gemm_graph, _ = mt.capture(torch, experts, rows, offs)
            record["epjit_layer_ms"] = mt.time_ms(torch, graph.replay, args.iters, barrier)
            record["gemm_alone_ms"] = mt.time_ms(torch, gemm_graph.replay, args.iters)
            record["nccl_layer_ms"] = mt.time_ms(torch, lambda: nccl.forward(x), args.iters, barrier)
            record["epjit_phases_ms"] = mt.mean_phases(torch, layer.forward, x, mt.EPJIT_PHASES, args.iters, barrier)
            record["nccl_phases_ms"] = mt.mean_phases(torch, nccl.forward, x, mt.NCCL_PHASES, args.iters, barrier)
            del graph, gemm_graph, graph_out, rows, offs
        op.close()
        del layer, op
        if tokens >= 2:
            half = (tokens + 1) // 2
            (op0, a), (op1, b) = new_layer(half), new_layer(half)
            two = mt.TwoBatchLayer(torch, (a, b), comm_stream)
            sequential = two.sequential(x).clone()
            overlapped = two.overlapped(x)
            compare(f"{tokens} tokens: two micro-batches, overlapped vs one after the other", overlapped, sequential,
                    exact=True)
            record["two_batch_rel_error_vs_one"] = compare(f"{tokens} tokens: two micro-batches vs one", sequential,
                                                           ours, exact=False)
            if cuda:
                seq_graph, seq_out = mt.capture(torch, two.sequential, x)
                ovl_graph, ovl_out = mt.capture(torch, two.overlapped, x)
                seq_graph.replay()
                ovl_graph.replay()
                compare(f"{tokens} tokens: two micro-batch graphs", ovl_out, seq_out, exact=True)
                record["two_batch_sequential_ms"] = mt.time_ms(torch, seq_graph.replay, args.iters, barrier)
                record["two_batch_overlapped_ms"] = mt.time_ms(torch, ovl_graph.replay, args.iters, barrier)
                phases = mt.mean_phases(torch, a.forward, x[:half], mt.EPJIT_PHASES, args.iters, barrier)
                # What the overlap can hide: micro-batch 1's dispatch and micro-batch 0's combine.
                record["two_batch_overlappable_ms"] = phases["dispatch"] + phases["combine"]
                record["two_batch_hidden_fraction"] = (
                    (record["two_batch_sequential_ms"] - record["two_batch_overlapped_ms"])
                    / record["two_batch_overlappable_ms"])
                del seq_graph, ovl_graph, seq_out, ovl_out
            op0.close()
            op1.close()
            del a, b, two, op0, op1
        if cuda:
            torch.cuda.empty_cache()
        records.append(record)
        if rank == 0:
            print(json.dumps(record), flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": vars(args), "world": world, "revision": epjit.git_revision(),
                       "gpu": torch.cuda.get_device_name() if cuda else "cpu", "points": records}, f, indent=1)
    comm.destroy()
    dist.destroy_process_group()
    for failure in failures:
        print(f"rank {rank}: FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", action="store_true", help="under torchrun: the torch layers, against NCCL")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: host ranks and gloo, outputs compared, nothing timed")
    parser.add_argument("--dist-backend", help="torch.distributed's backend (default: nccl on cuda, gloo on cpu; "
                        "gloo for ranks sharing a GPU, which NCCL refuses)")
    parser.add_argument("--target", help="epjit's target (default: sm90 on cuda, host on cpu)")
    parser.add_argument("--tokens", default="1,128,4096", help="tokens per rank, a layer each")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--iters", type=int, default=20)
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
