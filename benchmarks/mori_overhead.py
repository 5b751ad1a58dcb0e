"""Per-call time of epjit.mori's dispatch + combine against epjit's own op on one
GPU (world 1), to see what the compat layer adds. Prints µs per round trip.

    python benchmarks/mori_overhead.py [--tokens 128]
"""
import argparse
import time

import torch

import epjit
import epjit.mori
from epjit.mori import cco
from epjit.mori.ops.dispatch_combine_v2 import EpDispatchCombineConfig, EpDispatchCombineOp


def timed(fn, iters=200, warmup=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    torch.cuda.set_device(0)
    hidden, topk, experts = 7168, 8, 256
    n = args.tokens
    x = torch.randn(n, hidden, device="cuda").to(torch.bfloat16)
    w = torch.rand(n, topk, device="cuda")
    idx = torch.stack([torch.randperm(experts)[:topk] for _ in range(n)]).to(torch.int32).cuda()
    with cco.Communicator.init(1, 0, cco.get_unique_id()) as comm:
        cfg = EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=hidden, max_num_inp_token_per_rank=n,
                                      num_experts_per_rank=experts, num_experts_per_token=topk)
        mori_op = EpDispatchCombineOp(cfg, comm)
        plain = mori_op._op  # epjit's own op underneath

        def plain_round():
            out, out_w, _, _, _ = plain.dispatch(x, w, None, idx)
            plain.combine(out, out_w)

        def mori_round(routing):
            def run():
                result = mori_op.dispatch(x, w, None, idx, return_routing=routing)
                mori_op.combine(result[0], routing=result[5] if routing else None)
            return run

        print(f"tokens {n}: epjit {timed(plain_round):.1f} us, epjit.mori {timed(mori_round(False)):.1f} us, "
              f"epjit.mori with return_routing {timed(mori_round(True)):.1f} us per dispatch + combine")


if __name__ == "__main__":
    main()
