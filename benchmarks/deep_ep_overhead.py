"""Per-call time of epjit.deep_ep (DeepEP's Buffer on epjit) against epjit's own
op doing the same work, at EP1 on one GPU: what the DeepEP layer adds per round
trip. Host-bound at 1 token, so it is the layer's Python and torch calls.

    python benchmarks/deep_ep_overhead.py [--tokens 1,128,4096] [--iters 300] [--host] [--profile]

--profile: then cProfile of the layer's rounds at the first token count (the
functions with the most time of their own), to see what the layer spends.
--stages: then the normal mode's pieces timed alone at the first token count.
--python-only: then the Python alone at each token count: the layer's rounds and the
op's calls doing the same work with each native launching call answering with its
first result (epjit's wrapper and the layer run; no argument import, launch or wait),
so layer - same work is the layer's own Python, on any host (with --host too).
--trace DIR: then torch.profiler over the layer's and the native op's rounds at the
first token count: each kernel's and copy's device time per round printed, and a
Chrome trace per mode in DIR (where the round trip waits: the device, or the host).

--host: host ranks with CPU tensors (a check of the script where no GPU is, not a number).

Normal mode, each a round trip from torch's current stream:
  native: the op built as the layer builds it (receive_order="source"), its
          dispatch, the received count read back (DeepEP's normal dispatch
          synchronizes on it too), its combine;
  same work: the op's calls doing what the layer's do, from Python without
          the layer: dispatch_layout into fresh tensors, dispatch of the int64
          top-k, received_counts, deliver_received into fresh tensors, combine
          of the received rows into fresh tensors (layer - same work = the
          layer's own cost);
  layer:  get_dispatch_layout + dispatch + combine through deep_ep.Buffer;
  cached: dispatch with the handle + combine (a backward pass's pair).
Low-latency mode (num_max_dispatch_tokens_per_rank = the largest count, bf16):
  native: the op the layer built (std-MoE, weighted entries): dispatch,
          std_moe_pack, std_moe_combine into a preallocated output, int32 ids;
  same work: the same with the int64 top-k (narrowed by the op) and a fresh
          output, as the layer's calls run them;
  layer:  low_latency_dispatch + low_latency_combine (a fresh output each call);
  hook:   the same with return_recv_hook, each hook called at once;
  fp8:    the layer's round trip with use_fp8=True (float scales; the op's
          std_moe_quant cast after the pack), bf16 expert outputs back.
Shape: hidden 7168, top-8, 256 experts (all local at EP1), bf16.
"""
import argparse
import cProfile
import os
import pstats
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


def stages(buffer, native, x, idx, w, layout, iters):
    """The normal mode's round trip piece by piece (each piece's calls alone, so
    the stream and host costs of each show)."""
    per_rank, _, per_expert, in_rank, _ = layout
    idx32 = idx.to(torch.int32)

    def layout_only():
        buffer.get_dispatch_layout(idx, EXPERTS)

    def dispatch_combine():
        got, _, got_w, _, got_handle, _ = buffer.dispatch(x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
                                                          is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        buffer.combine(got, got_handle, topk_weights=got_w)

    def native_counts():
        out, out_w, _, _, total = native.dispatch(x, w, None, idx32)
        int(total[0].item())
        native.local_expert_counts()
        native.combine(out, out_w)

    def native_delivered():
        # What the layer's dispatch asks of the op, without the layer: the counts in
        # one read, the rows and local ids into fresh tensors by one kernel.
        native.dispatch(x, w, None, idx32)
        received, _ = native.received_counts()
        rows = torch.empty(received, HIDDEN, dtype=x.dtype, device=x.device)
        ids = torch.empty(received, TOPK, dtype=torch.int64, device=x.device)
        weights = torch.empty(received, TOPK, dtype=torch.float32, device=x.device)
        native.deliver_received(rows, ids, weights=weights)
        native.combine(native.combine_input(), None)

    def native_on_side_stream():
        with torch.cuda.stream(buffer.get_comm_stream()):
            out, out_w, _, _, total = native.dispatch(x, w, None, idx32)
            int(total[0].item())
            native.combine(out, out_w)

    for name, fn in (("get_dispatch_layout", layout_only), ("dispatch + combine", dispatch_combine),
                     ("native + local_expert_counts", native_counts),
                     ("native + received_counts + deliver_received", native_delivered),
                     ("native on the comm stream", native_on_side_stream)):
        print(f"  stage {name}: {timed(fn, iters):.1f} us", flush=True)


class _Replayed:
    """An op's native object whose launching calls answer with their first result:
    what is left of a round is Python (the layer's and epjit's wrapper's)."""

    LAUNCHES = {"dispatch", "received_counts", "deliver_received", "combine", "dispatch_layout", "std_moe_pack",
                "std_moe_combine"}

    def __init__(self, native):
        self.native, self._first = native, {}

    def __getattr__(self, name):
        real = getattr(self.native, name)
        if name not in self.LAUNCHES:
            return real

        def replay(*args, **kwargs):
            if name not in self._first:
                self._first[name] = real(*args, **kwargs)
            return self._first[name]
        return replay


def python_only(n, ops, rounds, iters):
    """Each round's Python per round trip, the ops' native launching calls replayed."""
    for op in ops:
        op._op = _Replayed(op._op)
    try:
        times = {name: timed(fn, iters * 10, warmup=100) for name, fn in rounds}
    finally:
        synchronize()
        for op in ops:
            op._op = op._op.native
    print(f"python only, tokens {n}: " + ", ".join(f"{name} {us:.1f}" for name, us in times.items()), flush=True)


def trace(directory, n, rounds, count=50):
    """Each round under torch.profiler (CUPTI sees the op's driver-API launches
    too): device time per round of each kernel and copy, and the trace."""
    from torch.profiler import ProfilerActivity, profile
    os.makedirs(directory, exist_ok=True)
    for name, fn in rounds:
        for _ in range(10):
            fn()
        synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(count):
                fn()
            synchronize()
        path = os.path.join(directory, f"{name.replace(' ', '-')}-{n}.json")
        prof.export_chrome_trace(path)
        device = [e for e in prof.key_averages() if e.device_time_total > 0]
        device.sort(key=lambda e: -e.device_time_total)
        print(f"--- trace {name}, {n} tokens, {count} rounds ({path}): device us per round", flush=True)
        for e in device[:16]:
            print(f"  {e.device_time_total / count:8.2f}  x{e.count / count:.0f}  {e.key[:90]}", flush=True)


def low_latency(buffer, x, idx, w, max_tokens, iters, python=False):
    """One low-latency round trip through the layer, and through the op it built."""
    n = x.shape[0]
    for _ in range(2):  # both of its ops built
        recv, _, handle, _, _ = buffer.low_latency_dispatch(x, idx, max_tokens, EXPERTS, use_fp8=False)
        buffer.low_latency_combine(recv, idx, w, handle)
    native = handle.op
    idx32, zeros = idx.to(torch.int32), torch.zeros_like(w)
    out = torch.empty(n, HIDDEN, dtype=torch.bfloat16, device=x.device)

    def native_round():
        native.dispatch(x, zeros, None, idx32)
        packed = native.std_moe_pack()[0]
        native.std_moe_combine(packed, w, idx32, out)

    def layer_round():
        got, _, got_handle, _, _ = buffer.low_latency_dispatch(x, idx, max_tokens, EXPERTS, use_fp8=False)
        buffer.low_latency_combine(got, idx, w, got_handle)

    def hook_round():
        got, _, got_handle, _, hook = buffer.low_latency_dispatch(x, idx, max_tokens, EXPERTS, use_fp8=False,
                                                                  return_recv_hook=True)
        hook()
        _, _, hook = buffer.low_latency_combine(got, idx, w, got_handle, return_recv_hook=True)
        hook()

    def same_work_round():
        native.dispatch(x, zeros, None, idx)
        packed = native.std_moe_pack()[0]
        native.std_moe_combine(packed, w, idx, torch.empty(n, HIDDEN, dtype=torch.bfloat16, device=x.device))

    native_us, same_us, layer_us, hook_us = (timed(f, iters) for f in (native_round, same_work_round, layer_round,
                                                                        hook_round))
    if python:
        python_only(n, list(buffer._low_latency._zeros), [("low latency same work", same_work_round),
                                                          ("low latency layer", layer_round)], iters)
    # The fp8 ops after the bf16 ones are freed (four ops of a large
    # max_tokens do not fit one 80 GB GPU), with expert outputs of the caller's.
    shape = tuple(recv.shape)
    buffer._low_latency.close()
    expert_out = torch.zeros(shape, dtype=torch.bfloat16, device=x.device)

    def fp8_round():
        _, _, got_handle, _, _ = buffer.low_latency_dispatch(x, idx, max_tokens, EXPERTS, use_fp8=True)
        buffer.low_latency_combine(expert_out, idx, w, got_handle)

    fp8_us = timed(fp8_round, iters)
    buffer._low_latency.close()
    print(f"low latency, tokens {n}: native {native_us:.1f}, same work {same_us:.1f}, epjit.deep_ep {layer_us:.1f} "
          f"(+{layer_us - native_us:.1f}; +{layer_us - same_us:.1f} over the same work), with hooks {hook_us:.1f} "
          f"(+{hook_us - native_us:.1f}), fp8 {fp8_us:.1f}", flush=True)
    return layer_round


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1,128,4096")
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--host", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--trace", metavar="DIR")
    parser.add_argument("--python-only", action="store_true")
    parser.add_argument("--modes", default="normal,low_latency",
                        help="which of normal, low_latency to time (four low-latency ops of 4096 tokens need an H200)")
    args = parser.parse_args()
    modes = set(args.modes.split(","))
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
    ll_buffer = epjit.deep_ep.Buffer(group, 0, 1, low_latency_mode=True, **({"device": "host"} if args.host else {}))
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

        def same_work_round():
            per_rank = torch.empty(1, dtype=torch.int32, device=device)
            per_expert = torch.empty(EXPERTS, dtype=torch.int32, device=device)
            in_rank = torch.empty(n, 1, dtype=torch.bool, device=device)
            native.dispatch_layout(idx, per_rank, per_expert, in_rank)
            native.dispatch(x, w32, None, idx, return_routing=True, keep_call=True)
            received, _ = native.received_counts()
            rows = torch.empty(received, HIDDEN, dtype=x.dtype, device=device)
            ids = torch.empty(received, TOPK, dtype=torch.int64, device=device)
            weights = torch.empty(received, TOPK, dtype=torch.float32, device=device)
            native.deliver_received(rows, ids, weights=weights)
            out = torch.empty(n, HIDDEN, dtype=torch.bfloat16, device=device)
            out_w = torch.empty(n, TOPK, dtype=torch.float32, device=device)
            native.combine(rows, weights, output=out, output_weights=out_w)

        def layer_round():
            nt_rank, _, nt_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS)
            got, _, got_w, _, got_handle, _ = buffer.dispatch(x, topk_idx=idx, topk_weights=w,
                                                              num_tokens_per_rank=nt_rank, is_token_in_rank=in_rank,
                                                              num_tokens_per_expert=nt_expert)
            buffer.combine(got, got_handle, topk_weights=got_w)

        def cached_round():
            got = buffer.dispatch(x, handle=handle)[0]
            buffer.combine(got, handle)

        if "normal" in modes:
            native_us, same_us, layer_us, cached_us = (timed(f, args.iters) for f in (native_round, same_work_round,
                                                                                       layer_round, cached_round))
            print(f"normal, tokens {n}: native {native_us:.1f}, same work {same_us:.1f}, epjit.deep_ep {layer_us:.1f} "
                  f"(+{layer_us - native_us:.1f}; +{layer_us - same_us:.1f} over the same work), cached handle "
                  f"{cached_us:.1f} (+{cached_us - native_us:.1f})", flush=True)
        if args.python_only and "normal" in modes:
            python_only(n, [native], [("normal same work", same_work_round), ("normal layer", layer_round)],
                        args.iters)
        rounds = [("normal mode", layer_round)] if "normal" in modes else []
        if "low_latency" in modes:
            rounds.append(("low latency", low_latency(ll_buffer, x, idx, w, max(counts), args.iters, args.python_only)))
        if args.stages and n == counts[0]:
            stages(buffer, native, x, idx, w, layout, args.iters)
        if args.trace and n == counts[0] and not args.host:
            normal = ([("native normal", native_round), ("same work normal", same_work_round)]
                      if "normal" in modes else [])
            trace(args.trace, n, normal + rounds)
        if args.profile and n == counts[0]:
            for name, fn in rounds:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.iters):
                    fn()
                synchronize()
                profile.disable()
                print(f"--- epjit.deep_ep {name}, {n} tokens, {args.iters} round trips", flush=True)
                pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    buffer._close()
    ll_buffer._close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
