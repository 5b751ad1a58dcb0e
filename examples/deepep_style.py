"""A program written against DeepEP's Buffer API only (its normal mode, as
vLLM's DeepEP high-throughput backend and Megatron-LM's flex dispatcher call it),
run on epjit: the one added line is `epjit.deep_ep.install()`.

    torchrun --nproc-per-node 2 examples/deepep_style.py
    # no GPU: host ranks with CPU tensors
    EPJIT_DEEPEP_EXAMPLE_DEVICE=cpu torchrun --nproc-per-node 2 examples/deepep_style.py

Each step: get_dispatch_layout, dispatch (tokens, top-k ids and weights), identity
experts that scale each received row by its local weights' sum, combine; then the
same batch again through the cached handle (a dispatch with `handle=`, as a
backward pass does), combined back. Each output must equal the token's weighted
rows summed over the ranks it went to.

Then the low-latency calls, as a decode step runs them (vLLM's and SGLang's
DeepEP low-latency backends): low_latency_dispatch with return_recv_hook, a
matmul queued on the same stream before the hook (the transfers overlap it),
identity experts on the [local experts, ranks * max tokens, hidden] layout,
written into get_next_low_latency_combine_buffer (zero copy), then
low_latency_combine with its hook: each token must be its rows times its top-k
weights, summed in top-k order. Exits 1 if any rank's check fails.
"""
import os
import sys

import torch
import torch.distributed as dist

import epjit.deep_ep

epjit.deep_ep.install()  # the one line a DeepEP program adds

import deep_ep  # noqa: E402

HIDDEN, TOPK, EXPERTS, MAX_TOKENS = 7168, 8, 256, 256


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    on_gpu = os.environ.get("EPJIT_DEEPEP_EXAMPLE_DEVICE", "cuda") == "cuda"
    if on_gpu:
        if not torch.cuda.is_available():
            sys.exit("deepep_style.py: torch sees no GPU; EPJIT_DEEPEP_EXAMPLE_DEVICE=cpu runs host ranks")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())  # ranks may share a GPU
    device = "cuda" if on_gpu else "cpu"
    dist.init_process_group("gloo")
    group = dist.new_group(list(range(world)), backend="gloo")
    hint = deep_ep.Config(24).get_nvl_buffer_size_hint(HIDDEN * 2, world)
    # Host ranks (epjit only) name their device; DeepEP's call has no such keyword.
    buffer = deep_ep.Buffer(group, hint, 0, **({} if on_gpu else dict(device="host")))
    print(f"rank {rank}: deep_ep on epjit, {world} ranks", flush=True)

    failures = 0
    generator = torch.Generator().manual_seed(1234 + rank)
    per_rank = EXPERTS // world
    for tokens in (MAX_TOKENS, 37, 1):
        x = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16).to(device)
        topk_idx = torch.stack([torch.randperm(EXPERTS, generator=generator)[:TOPK] for _ in range(tokens)]).to(device)
        topk_weights = torch.rand(tokens, TOPK, generator=generator).to(device)

        per_rank_count, per_rdma, per_expert, in_rank, previous = buffer.get_dispatch_layout(topk_idx, EXPERTS)
        recv_x, recv_idx, recv_w, per_local_expert, handle, event = buffer.dispatch(
            x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=per_rank_count,
            num_tokens_per_rdma_rank=per_rdma, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            expert_alignment=128, previous_event=previous, async_finish=True)
        event.current_stream_wait()
        # Identity experts: each received row times its local experts' weights.
        local_weight = torch.where(recv_idx >= 0, recv_w, 0.0).sum(1, keepdim=True)
        expert_out = (recv_x.float() * local_weight).to(torch.bfloat16)
        out, _, _ = buffer.combine(expert_out, handle)

        # The same rows again through the cached handle (a backward's dispatch).
        grad = torch.ones_like(x)
        grad_recv, *_ = buffer.dispatch(grad, handle=handle)
        grad_in, _, _ = buffer.combine(grad_recv, handle)

        # Each destination rank's row (x times that rank's weights, rounded to bf16),
        # summed in f32 in the order the token names the ranks, rounded once.
        want = torch.empty(tokens, HIDDEN, dtype=torch.bfloat16, device=device)
        for t in range(tokens):
            ranks = list(dict.fromkeys(int(e) // per_rank for e in topk_idx[t]))
            acc = None
            for r in ranks:
                weight = topk_weights[t][topk_idx[t] // per_rank == r].sum()
                part = (x[t].float() * weight).to(torch.bfloat16).float()
                acc = part if acc is None else acc + part
            want[t] = acc.to(torch.bfloat16)
        copies = in_rank.sum(1, keepdim=True).float()
        ok = torch.equal(out, want) and torch.equal(grad_in.float(), copies.expand_as(grad_in))
        ok = ok and all(count % 128 == 0 for count in per_local_expert)
        print(f"rank {rank}: {tokens} tokens, {recv_x.shape[0]} received, "
              f"{'identity check passed' if ok else 'CHECK FAILED'}", flush=True)
        failures += not ok
    failures += low_latency_steps(deep_ep, group, rank, world, device, generator)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


def low_latency_steps(deep_ep, group, rank, world, device, generator):
    max_tokens = 128
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(max_tokens, HIDDEN, world, EXPERTS)
    buffer = deep_ep.Buffer(group, 0, hint, low_latency_mode=True, num_qps_per_rank=EXPERTS // world,
                            **({} if device == "cuda" else dict(device="host")))
    side = torch.randn(512, 512, device=device)  # other work the transfers overlap
    failures = 0
    # bf16, then fp8 with per-128 float scales (vLLM's default), then bf16 again.
    for tokens, fp8 in ((max_tokens, False), (7, True), (1, False)):
        x = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16).to(device)
        topk_idx = torch.stack([torch.randperm(EXPERTS, generator=generator)[:TOPK] for _ in range(tokens)]).to(device)
        topk_weights = torch.rand(tokens, TOPK, generator=generator).to(device)
        recv_x, recv_count, handle, _, hook = buffer.low_latency_dispatch(
            x, topk_idx, max_tokens, EXPERTS, use_fp8=fp8, return_recv_hook=True)
        busy = side @ side
        hook()
        # Identity experts, written where the combine reads them (zero copy);
        # fp8 rows dequantized: codes times their block's scale.
        expert_out = buffer.get_next_low_latency_combine_buffer(handle)
        if fp8:
            codes, scales = recv_x
            expert_out.copy_((codes.float() * scales.repeat_interleave(128, dim=2)).to(torch.bfloat16))
        else:
            expert_out.copy_(recv_x)
        out, _, hook = buffer.low_latency_combine(expert_out, topk_idx, topk_weights, handle, zero_copy=True,
                                                  return_recv_hook=True)
        busy = busy @ side
        hook()
        # Per token: +0.0, then each of its rows times its weight as one fused
        # multiply-add (float64 holds the exact sum here), rounded once to bf16.
        acc = torch.zeros(tokens, HIDDEN, dtype=torch.float32, device=device)
        for k in range(TOPK):
            acc = (acc.double() + x.double() * topk_weights[:, k:k + 1].double()).float()
        if fp8:  # E4M3 keeps 3 mantissa bits: each row within 1/16 of itself, then two bf16 roundings
            bound = sum(topk_weights[:, k:k + 1] * x.float().abs() for k in range(TOPK)) / 14 + 1e-3
            ok = bool(((out.float() - acc).abs() <= bound).all())
        else:
            ok = torch.equal(out, acc.to(torch.bfloat16))
        ok = ok and int(recv_count.sum()) <= world * max_tokens * TOPK
        print(f"rank {rank}: low latency{' fp8' if fp8 else ''}, {tokens} tokens, {int(recv_count.sum())} expert "
              f"rows here, {'weighted check passed' if ok else 'CHECK FAILED'}", flush=True)
        failures += not ok
    buffer.destroy() if buffer.explicitly_destroy else None
    return failures


if __name__ == "__main__":
    main()
