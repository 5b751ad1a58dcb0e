"""Per-call time of epjit's Python op and of epjit.mori's dispatch + combine,
host-bound at small sizes: what the Python layers add over the C++ op
(epjit-bench's `host rt us`). Prints µs per round trip, on torch's default
stream and on a side stream (as serving engines run).

    python benchmarks/mori_overhead.py [--world 2] [--tokens 1,128,4096] [--iters 500] [--held 58] [--profile]

--world N: N rank processes, rank r on GPU r / --ranks-per-gpu; 256 experts in all
(256 / N per rank, 128 at EP2), each rank its own random tokens; rank 0 prints
its own times (every rank runs the same calls, so the op's meetings pace them).
--ranks-per-gpu 2 runs world 2 on one GPU: a check of the script, not a number.

--held L: recording as a training step does, one handle per MoE layer kept
until the step ends (DeepSeek-V3 has 58), then all dropped.

--profile: then cProfile of each variant at the first token count (the functions
with the most time of their own), to see what a layer still spends.
"""
import argparse
import cProfile
import multiprocessing
import pickle
import pstats
import time

import torch

import epjit
import epjit.mori
from epjit.mori import cco
from epjit.mori.ops.dispatch_combine_v2 import EpDispatchCombineConfig, EpDispatchCombineOp


def timed(fn, iters, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1,128,4096")
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--held", type=int, default=58)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--ranks-per-gpu", type=int, default=1)
    return parser.parse_args()


def main():
    args = parse_args()
    gpus_needed = -(-args.world // args.ranks_per_gpu)
    if torch.cuda.device_count() < gpus_needed:
        raise SystemExit(f"--world {args.world} with --ranks-per-gpu {args.ranks_per_gpu} needs {gpus_needed} GPUs; "
                         f"torch sees {torch.cuda.device_count()}")
    if args.world == 1:
        run_rank(args, 1, 0, pickle.dumps(cco.get_unique_id()))
        return
    context = multiprocessing.get_context("spawn")
    failures = context.Queue()
    uid = pickle.dumps(cco.get_unique_id())
    ranks = [context.Process(target=rank_main, args=(args, args.world, r, uid, failures)) for r in range(args.world)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()
    reported = []
    while not failures.empty():
        reported.append(failures.get())
    if reported or any(rank.exitcode != 0 for rank in ranks):
        raise SystemExit("\n".join(reported) or f"rank exit codes {[rank.exitcode for rank in ranks]}")


def rank_main(args, world, rank, uid, failures):
    try:
        run_rank(args, world, rank, uid)
    except BaseException as error:  # the parent reports every rank's failure
        failures.put(f"rank {rank}: {type(error).__name__}: {error}")
        raise


def run_rank(args, world, rank, uid):
    torch.cuda.set_device(rank // args.ranks_per_gpu)  # the communicator follows torch's current device
    report = print if rank == 0 else (lambda *_, **__: None)
    hidden, topk, experts = 7168, 8, 256
    if experts % world:
        raise SystemExit(f"--world {world} must divide the {experts} experts")
    counts = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(rank)
    side = torch.cuda.Stream()
    with cco.Communicator.init(world, rank, pickle.loads(uid), timeout_seconds=120) as comm:
        cfg = EpDispatchCombineConfig(rank=rank, world_size=world, hidden_dim=hidden,
                                      max_num_inp_token_per_rank=max(counts),
                                      num_experts_per_rank=experts // world, num_experts_per_token=topk)
        mori_op = EpDispatchCombineOp(cfg, comm)
        plain = mori_op._op  # epjit's own op underneath
        report(f"epjit {epjit.git_revision()}, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
               f"world {world} ({args.ranks_per_gpu} rank(s) per GPU), rank 0's times")
        for n in counts:
            x = torch.randn(n, hidden, device="cuda").to(torch.bfloat16)
            w = torch.rand(n, topk, device="cuda")
            idx = torch.stack([torch.randperm(experts)[:topk] for _ in range(n)]).to(torch.int32).cuda()

            def plain_round():
                out, out_w, _, _, _ = plain.dispatch(x, w, None, idx)
                plain.combine(out, out_w)

            def mori_round(routing):
                def run():
                    result = mori_op.dispatch(x, w, None, idx, return_routing=routing)
                    mori_op.combine(result[0], routing=result[5] if routing else None)
                return run

            def held_step():
                held = []
                for _ in range(args.held):
                    result = mori_op.dispatch(x, w, None, idx, return_routing=True)
                    mori_op.combine(result[0], routing=result[5])
                    held.append(result[5])

            steps = max(1, args.iters // args.held)
            for stream_name, stream in (("default", torch.cuda.default_stream()), ("side", side)):
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    report(f"tokens {n}, {stream_name} stream: epjit {timed(plain_round, args.iters):.1f} us, "
                          f"epjit.mori {timed(mori_round(False), args.iters):.1f} us, "
                          f"epjit.mori with return_routing {timed(mori_round(True), args.iters):.1f} us, "
                          f"the same with {args.held} held per step "
                          f"{timed(held_step, steps, warmup=2) / args.held:.1f} us "
                          "per dispatch + combine", flush=True)
            if args.profile and n == counts[0]:
                for name, fn in (("epjit", plain_round), ("epjit.mori", mori_round(False)),
                                 ("epjit.mori with return_routing", mori_round(True))):
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(args.iters):
                        fn()
                    torch.cuda.synchronize()
                    profile.disable()
                    report(f"--- {name}, {n} tokens, {args.iters} round trips")
                    if rank == 0:
                        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
        mori_op.close()


if __name__ == "__main__":
    main()
