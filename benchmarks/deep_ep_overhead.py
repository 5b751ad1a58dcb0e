"""Per-call time of epjit.deep_ep (DeepEP's Buffer on epjit) against epjit's own
op doing the same work, at EP1 on one GPU: what the DeepEP layer adds per round
trip. Host-bound at 1 token, so it is the layer's Python and torch calls.

    python benchmarks/deep_ep_overhead.py [--tokens 1,128,4096] [--iters 300] [--host]

--host: host ranks with CPU tensors (a check of the script where no GPU is, not a number).

Normal mode, each a round trip from torch's current stream:
  native: the op built as the layer builds it (receive_order="source"), its
          dispatch, the received count read back (DeepEP's normal dispatch
          synchronizes on it too), its combine;
  layer:  get_dispatch_layout + dispatch + combine through deep_ep.Buffer;
  cached: dispatch with the handle + combine (a backward pass's pair).
Shape: hidden 7168, top-8, 256 experts (all local at EP1), bf16.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import epjit
import epjit.deep_ep

HIDDEN, TOPK, EXPERTS = 7168, 8, 256


def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, iters, warmup=30):
    for _ in range(warmup):
        fn()
    synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1,128,4096")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--host", action="store_true")
    args = parser.parse_args()
    if not args.host and not torch.cuda.is_available():
        raise SystemExit("deep_ep_overhead.py times GPU calls; torch sees no GPU (--host checks the script on CPUs)")
    device = "cpu" if args.host else "cuda"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=0, world_size=1)
    group = dist.new_group([0], backend="gloo")
    counts = [int(t) for t in args.tokens.split(",")]
    buffer = epjit.deep_ep.Buffer(group, max_tokens_per_rank=max(counts), **({"device": "host"} if args.host else {}))
    gpu = "host ranks" if args.host else torch.cuda.get_device_name()
    print(f"epjit {epjit.git_revision()}, torch {torch.__version__}, {gpu}, EP1, "
          f"hidden {HIDDEN}, top-{TOPK}, {EXPERTS} experts, bf16; us per dispatch + combine", flush=True)
    torch.manual_seed(0)
    for n in counts:
        x = torch.randn(n, HIDDEN, device=device).to(torch.bfloat16)
        w = torch.rand(n, TOPK, device=device)
        idx = torch.stack([torch.randperm(EXPERTS)[:TOPK] for _ in range(n)]).to(device)
        layout = buffer.get_dispatch_layout(idx, EXPERTS)
        recv, _, _, _, handle, _ = buffer.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=layout[0],
                                                   is_token_in_rank=layout[3], num_tokens_per_expert=layout[2])
        buffer.combine(recv, handle)
        native = handle.op  # the op the layer built, so both run the same kernels
        idx32, w32 = idx.to(torch.int32), w.contiguous()

        def native_round():
            out, out_w, _, _, total = native.dispatch(x, w32, None, idx32)
            int(total[0].item())
            native.combine(out, out_w)

        def layer_round():
            nt_rank, _, nt_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS)
            got, _, got_w, _, got_handle, _ = buffer.dispatch(x, topk_idx=idx, topk_weights=w,
                                                              num_tokens_per_rank=nt_rank, is_token_in_rank=in_rank,
                                                              num_tokens_per_expert=nt_expert)
            buffer.combine(got, got_handle, topk_weights=got_w)

        def cached_round():
            got = buffer.dispatch(x, handle=handle)[0]
            buffer.combine(got, handle)

        native_us, layer_us, cached_us = (timed(f, args.iters) for f in (native_round, layer_round, cached_round))
        print(f"tokens {n}: native {native_us:.1f}, epjit.deep_ep {layer_us:.1f} (+{layer_us - native_us:.1f}), "
              f"cached handle {cached_us:.1f} (+{cached_us - native_us:.1f})", flush=True)
    buffer.destroy() if buffer.explicitly_destroy else buffer._close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
