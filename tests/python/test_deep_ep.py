"""DeepEP's API (`deep_ep.Buffer`, normal mode) on epjit, checked by DeepEP's
stated semantics: the layout, the receive order (grouped by source rank, each
rank's in token order), local expert ids with -1 elsewhere, counts padded to
the alignment, the handle and its cached dispatch, combine = the rows summed
over the ranks a token went to (no weights), num_worst_tokens, fp8 with
scales, events, and a forward and backward as Megatron-LM's flex dispatcher
runs them. One process per rank over a gloo group: GPU ranks where torch has
CUDA (EPJIT_GPU_TEST_RANKS_PER_GPU lets ranks share a GPU), host ranks always.
Needs torch: skipped, with the reason, where it is absent.
"""
import tempfile
import os

import pytest

torch = pytest.importorskip("torch", reason="epjit.deep_ep works on torch tensors; torch is not installed here")

import epjit  # noqa: E402
import epjit.cache  # noqa: E402
import epjit.deep_ep  # noqa: E402
from gpu_ranks import gpu_of, run_rank_processes, skip_unless_ranks_fit  # noqa: E402

HIDDEN, TOPK, EXPERTS_PER_RANK = 256, 4, 5
DEVICE = "cpu"


def rank_inputs(world, rank, seed, tokens):
    """Rank `rank`'s call `seed` (every rank can rebuild every rank's): masked
    slots (-1) and a token that selects nothing included."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    w = torch.rand(tokens, TOPK, generator=g)
    experts = world * EXPERTS_PER_RANK
    idx = torch.stack([torch.randperm(experts, generator=g)[:TOPK] for _ in range(tokens)]).long() if tokens else \
        torch.empty(0, TOPK, dtype=torch.long)
    if tokens > 4:
        idx[1, 2] = -1
        idx[3, :] = -1
    return x.to(DEVICE), w.to(DEVICE), idx.to(DEVICE)


def goes_to(idx, rank):
    return [t for t in range(idx.shape[0]) if any(int(e) >= 0 and int(e) // EXPERTS_PER_RANK == rank for e in idx[t])]


def expected_receive(world, rank, seed, counts):
    """Rows in DeepEP's order: source rank by rank, each rank's tokens in order."""
    rows = []
    for source in range(world):
        x, w, idx = rank_inputs(world, source, seed, counts[source])
        rows += [(source, t, x[t], w[t], idx[t]) for t in goes_to(idx, rank)]
    return rows


def check(ok, what, failed):
    if not ok:
        failed.append(what)


def layout_and_round_trip(deep_ep, buffer, world, rank, seed, counts, failed, alignment=4, per_node=None):
    """per_node: the group's ranks per node when it spans several (DeepEP's
    internode dispatch: the same receive order over the whole group)."""
    x, w, idx = rank_inputs(world, rank, seed, counts[rank])
    experts = world * EXPERTS_PER_RANK
    per_rank, per_rdma, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
    want_in_rank = torch.zeros(idx.shape[0], world, dtype=torch.bool)
    for t in range(idx.shape[0]):
        for e in idx[t].tolist():
            if e >= 0:
                want_in_rank[t, e // EXPERTS_PER_RANK] = True
    check(torch.equal(in_rank.cpu(), want_in_rank), "is_token_in_rank", failed)
    check(per_rank.dtype == torch.int32 and per_rank.cpu().tolist() == want_in_rank.sum(0).tolist(),
          "num_tokens_per_rank", failed)
    if per_node is None:
        check(per_rdma is None, "num_tokens_per_rdma_rank is None on one node", failed)
    else:
        want_per_node = want_in_rank.view(-1, world // per_node, per_node).any(2).sum(0).tolist()
        check(per_rdma is not None and per_rdma.dtype == torch.int32 and per_rdma.cpu().tolist() == want_per_node,
              f"num_tokens_per_rdma_rank {None if per_rdma is None else per_rdma.tolist()}, expected "
              f"{want_per_node}", failed)
    want_per_expert = [int((idx == e).sum()) for e in range(experts)]
    check(per_expert.cpu().tolist() == want_per_expert, "num_tokens_per_expert", failed)

    recv_x, recv_idx, recv_w, counts_list, handle, event = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w, expert_alignment=alignment)
    want = expected_receive(world, rank, seed, counts)
    check(recv_x.shape[0] == len(want), f"received {recv_x.shape[0]} rows, expected {len(want)}", failed)
    if recv_x.shape[0] == len(want) and want:
        check(torch.equal(recv_x.cpu(), torch.stack([r[2].cpu() for r in want])), "recv_x in source order", failed)
        want_idx = torch.stack([r[4].cpu() for r in want])
        local = want_idx - rank * EXPERTS_PER_RANK
        mine = (want_idx >= 0) & (local >= 0) & (local < EXPERTS_PER_RANK)
        check(recv_idx.dtype == idx.dtype and torch.equal(recv_idx.cpu(), torch.where(mine, local, -1)),
              "recv_topk_idx: local ids, -1 elsewhere", failed)
        want_w = torch.where(mine, torch.stack([r[3].cpu() for r in want]), 0.0)
        check(torch.equal(recv_w.cpu(), want_w), "recv_topk_weights: 0 where not local", failed)
    per_local = [sum(1 for r in want if (e + rank * EXPERTS_PER_RANK) in r[4].tolist())
                 for e in range(EXPERTS_PER_RANK)]
    check(counts_list == [(c + alignment - 1) // alignment * alignment for c in per_local],
          f"num_recv_tokens_per_expert_list {counts_list}, expected {per_local} padded to {alignment}", failed)

    # Identity experts: combine sums each token's copies, one per rank it went to.
    combined, combined_w, _ = buffer.combine(recv_x, handle, topk_weights=recv_w)
    copies = in_rank.sum(1).float()[:, None]
    check(torch.equal(combined.cpu(), (x.float() * copies).to(torch.bfloat16).cpu()), "combine: copies summed",
          failed)
    masked_w = torch.where(idx >= 0, w, 0.0)
    check(torch.equal(combined_w.cpu(), masked_w.cpu()), "combined weights are the token's", failed)
    return x, w, idx, handle


def cached_dispatch_and_backward(buffer, world, rank, seed, counts, failed):
    """Megatron-LM's flex dispatcher: forward dispatch, experts (x 3), combine;
    backward: combine's backward is a dispatch with the cached handle, the
    experts' backward (x 3), dispatch's backward a combine with the handle."""
    x, w, idx = rank_inputs(world, rank, seed, counts[rank])
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, world * EXPERTS_PER_RANK)
    recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w)
    out, _, _ = buffer.combine((recv_x.float() * 3).to(torch.bfloat16), handle)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16).to(x.device)
    grad_recv, none_idx, none_w, none_counts, _, _ = buffer.dispatch(grad_out, handle=handle)
    check(none_idx is None and none_w is None and none_counts is None, "a cached dispatch returns no top-k", failed)
    # The cached dispatch puts each token's gradient where the forward put its row.
    copies = in_rank.sum(1)
    check(grad_recv.shape == recv_x.shape, "cached dispatch: the forward's rows", failed)
    grad_in, _, _ = buffer.combine((grad_recv.float() * 3).to(torch.bfloat16), handle)
    want = (grad_out.float() * 3).to(torch.bfloat16).float() * copies.float()[:, None]
    check(torch.equal(grad_in.cpu(), want.to(torch.bfloat16).cpu()), "backward: bit-exact inverse", failed)
    want_out = (x.float() * 3).to(torch.bfloat16).float() * copies.float()[:, None]
    check(torch.equal(out.cpu(), want_out.to(torch.bfloat16).cpu()), "forward output", failed)


def worst_tokens_fp8_and_events(buffer, world, rank, seed, counts, failed):
    x, w, idx = rank_inputs(world, rank, seed, counts[rank])
    experts = world * EXPERTS_PER_RANK
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
    worst = sum(counts)  # every token of every rank
    recv_x, recv_idx, recv_w, counts_list, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w, num_worst_tokens=worst)
    want = expected_receive(world, rank, seed, counts)
    check(recv_x.shape[0] == worst and counts_list == [], "num_worst_tokens: that many rows, no list", failed)
    check(bool((recv_idx[len(want):] == -1).all()), "num_worst_tokens: padding rows select nothing", failed)
    padded = torch.zeros(worst, HIDDEN, dtype=torch.bfloat16, device=x.device)
    padded[:len(want)] = recv_x[:len(want)]
    combined, _, _ = buffer.combine(padded, handle)
    check(torch.equal(combined.cpu(), (x.float() * in_rank.sum(1).float()[:, None]).to(torch.bfloat16).cpu()),
          "num_worst_tokens combine", failed)

    # fp8 with per-128-channel scales; an event in, async_finish out.
    fp8 = torch.float8_e4m3fn
    codes = (x.float() / 4).to(fp8)
    scales = torch.rand(x.shape[0], HIDDEN // 128, generator=torch.Generator().manual_seed(seed)).to(x.device)
    before = epjit.deep_ep.Buffer.capture()
    (recv_codes, recv_scales), _, _, _, handle, event = buffer.dispatch(
        (codes, scales), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=idx, topk_weights=w, previous_event=before, async_finish=True)
    with event:
        pass  # the current stream waits for the dispatch on leaving
    check(recv_scales.dtype == torch.float32 and tuple(recv_scales.shape) == (len(want), HIDDEN // 128),
          "fp8 scales come back as the caller's float32 [rows, hidden // 128]", failed)
    if len(want):
        sources = {}
        for source in range(world):
            sx, _, sidx = rank_inputs(world, source, seed, counts[source])
            sources[source] = ((sx.float() / 4).to(fp8), torch.rand(sx.shape[0], HIDDEN // 128,
                               generator=torch.Generator().manual_seed(seed)))
        want_codes = torch.stack([sources[s][0][t].cpu() for s, t, *_ in want])
        want_scales = torch.stack([sources[s][1][t] for s, t, *_ in want])
        check(torch.equal(recv_codes.cpu().view(torch.uint8), want_codes.view(torch.uint8)), "fp8 codes", failed)
        check(torch.equal(recv_scales.cpu(), want_scales), "fp8 scales", failed)
    back = torch.zeros(len(want), HIDDEN, dtype=torch.bfloat16, device=x.device)
    buffer.combine(back, handle)


def low_latency_reference(x, idx, w):
    """DeepEP's low-latency combine of identity-scaled experts (expert e returns its
    rows times 1 + (e % EXPERTS_PER_RANK) / 8, in bf16): per token +0.0, then
    acc + row * weight per entry in top-k order as one fused multiply-add (the
    float64 sum of an exact product and acc, rounded once to float32), rounded
    once to bf16."""
    acc = torch.zeros(x.shape, dtype=torch.float32)
    x = x.cpu()
    for k in range(idx.shape[1]):
        experts = idx[:, k].cpu()
        live = experts >= 0
        factor = 1 + (experts.clamp(min=0) % EXPERTS_PER_RANK).float() / 8
        row = (x.float() * factor[:, None]).to(torch.bfloat16).double()
        fused = (acc.double() + row * w[:, k].cpu().double()[:, None]).float()
        acc = torch.where(live[:, None], fused, acc)
    return acc.to(torch.bfloat16)


def low_latency_round_trip(buffer, world, rank, seed, counts, max_tokens, failed, hook=False, zero_copy=False,
                           stats=None, between=None):
    """One low-latency dispatch and combine: DeepEP's layout and counts, identity-scaled
    experts, the weighted combine; with hook, `between` runs on the stream before each
    hook (a matmul: work the transfers overlap)."""
    x, w, idx = rank_inputs(world, rank, seed, counts[rank])
    experts = world * EXPERTS_PER_RANK
    recv_x, recv_count, handle, event, recv_hook = buffer.low_latency_dispatch(
        x, idx, max_tokens, experts, cumulative_local_expert_recv_stats=stats, use_fp8=False,
        return_recv_hook=hook)
    check((recv_hook is not None) == hook, "a hook exactly when asked for", failed)
    if hook:
        if between is not None:
            between()
        recv_hook()
    check(tuple(recv_x.shape) == (EXPERTS_PER_RANK, world * max_tokens, HIDDEN) and recv_x.dtype == torch.bfloat16,
          f"recv_x is {recv_x.dtype} {tuple(recv_x.shape)}", failed)
    rows = {}
    for source in range(world):
        sx, _, sidx = rank_inputs(world, source, seed, counts[source])
        for t in range(sx.shape[0]):
            for e in sorted({int(v) for v in sidx[t].tolist() if v >= 0 and v // EXPERTS_PER_RANK == rank}):
                rows.setdefault(e % EXPERTS_PER_RANK, []).append(sx[t].cpu())
    got_counts = recv_count.cpu().tolist()
    want_counts = [len(rows.get(e, [])) for e in range(EXPERTS_PER_RANK)]
    check(recv_count.dtype == torch.int32 and got_counts == want_counts,
          f"recv_count {got_counts}, expected {want_counts}", failed)
    out = buffer.get_next_low_latency_combine_buffer(handle) if zero_copy else torch.zeros_like(recv_x)
    for e in range(EXPERTS_PER_RANK):
        n = min(got_counts[e], len(rows.get(e, [])))
        got = recv_x[e, :n].cpu()
        want = torch.stack(rows[e]) if n else got
        key = lambda t: t.view(torch.int16).tolist()  # noqa: E731
        check(sorted(map(key, got)) == sorted(map(key, want)), f"expert {e}: its rows (in any order)", failed)
        out[e, :n] = (recv_x[e, :n].float() * (1 + e / 8)).to(torch.bfloat16)
    combined, event, combine_hook = buffer.low_latency_combine(out, idx, w, handle, zero_copy=zero_copy,
                                                               return_recv_hook=hook)
    if hook:
        if between is not None:
            between()
        combine_hook()
    check(tuple(combined.shape) == (x.shape[0], HIDDEN) and combined.dtype == torch.bfloat16,
          "combined_x [tokens, hidden] bf16", failed)
    check(torch.equal(combined.cpu(), low_latency_reference(x, idx, w)),
          "low-latency combine: the weighted rows, DeepEP's bits", failed)
    return got_counts


def deepep_cast_reference(x, round_scale):
    """DeepEP's per-128 cast of [n, hidden] bf16 rows, modelled in float32: amax
    floored at 1e-4; scale_inv = amax * (1/448) and codes x * (448 / amax), or
    with round_scale a power of two 2^e >= amax * (1/448) and codes x * 2^-e.
    Returns (codes float8_e4m3fn [n, hidden], scale_inv float32 [n, hidden / 128])."""
    n, hidden = x.shape
    v = x.float().reshape(n, hidden // 128, 128)
    amax = v.abs().amax(-1).clamp(min=1e-4)
    scale_inv = amax * torch.tensor(1 / 448, dtype=torch.float32)
    factor = torch.full_like(amax, 448) / amax  # a division (448 / amax is torch's reciprocal times 448)
    if round_scale:
        bits = scale_inv.view(torch.int32)
        e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).int()
        scale_inv = ((e + 127) << 23).view(torch.float32)
        factor = ((127 - e) << 23).view(torch.float32)
    codes = (v * factor[..., None]).to(torch.float8_e4m3fn).reshape(n, hidden)
    return codes, scale_inv


def low_latency_fp8(buffer, world, rank, failed):
    """use_fp8 in its three scale forms: codes and scales are DeepEP's cast of each
    row that reached the expert, scales in its column-major layout (float
    [experts, rows, hidden / 128] or int32 words of four UE8M0 bytes [experts, rows,
    hidden / 512], this one through the receive hook); then the experts return their
    rows dequantized, times 1 + e / 8, and the combine sums them as in bf16."""
    hidden, tokens, max_tokens = 512, 7, 16
    experts = world * EXPERTS_PER_RANK
    rows_per_expert = world * max_tokens

    def inputs(source):
        g = torch.Generator().manual_seed(70 + source)
        magnitude = torch.exp2(torch.randint(-9, 9, (tokens, hidden // 128), generator=g).float())
        x = (torch.randn(tokens, hidden, generator=g) * magnitude.repeat_interleave(128, 1)).to(torch.bfloat16)
        _, w, idx = rank_inputs(world, source, 70, tokens)
        return x, w.cpu(), idx.cpu()

    x, w, idx = inputs(rank)
    for round_scale, ue8m0 in ((False, False), (True, False), (True, True)):
        form = "ue8m0" if ue8m0 else "pow2" if round_scale else "float"
        (codes, scales), count, handle, _, hook = buffer.low_latency_dispatch(
            x.to(DEVICE), idx.to(DEVICE), max_tokens, experts, use_fp8=True, round_scale=round_scale,
            use_ue8m0=ue8m0, return_recv_hook=ue8m0)
        if hook is not None:  # the cast runs in the hook, after the pack
            hook()
        check(codes.dtype == torch.float8_e4m3fn and tuple(codes.shape) == (EXPERTS_PER_RANK, rows_per_expert, hidden),
              f"{form}: codes are {codes.dtype} {tuple(codes.shape)}", failed)
        words = hidden // 512 if ue8m0 else hidden // 128
        check(scales.dtype == (torch.int32 if ue8m0 else torch.float32) and
              tuple(scales.shape) == (EXPERTS_PER_RANK, rows_per_expert, words) and
              scales.stride() == (words * rows_per_expert, 1, rows_per_expert),
              f"{form}: scales are {scales.dtype} {tuple(scales.shape)} strides {scales.stride()} (expected "
              "DeepEP's column-major layout)", failed)
        # Per expert, the reference's (codes, scale bytes) of every row sent to it.
        want = {}
        for source in range(world):
            sx, _, sidx = inputs(source)
            ref_codes, ref_scales = deepep_cast_reference(sx, round_scale)
            for t in range(tokens):
                for e in {int(v) for v in sidx[t].tolist() if v >= 0 and v // EXPERTS_PER_RANK == rank}:
                    stored = (ref_scales[t].view(torch.int32) >> 23).to(torch.uint8) if ue8m0 else ref_scales[t]
                    want.setdefault(e % EXPERTS_PER_RANK, []).append(
                        (ref_codes[t].view(torch.uint8).tolist(), stored.view(torch.uint8).tolist()))
        got_count = count.cpu().tolist()
        block_scales = torch.empty(scales.shape, dtype=scales.dtype).copy_(scales.cpu())  # row-major
        if ue8m0:  # byte b % 4 of word b / 4 is block b's
            block_scales = block_scales.view(torch.uint8).view(EXPERTS_PER_RANK, rows_per_expert, -1)
        expert_out = torch.zeros(EXPERTS_PER_RANK, rows_per_expert, hidden, dtype=torch.bfloat16, device=x.device)
        for e in range(EXPERTS_PER_RANK):
            n = got_count[e]
            got = [(codes[e, p].cpu().view(torch.uint8).tolist(),
                    block_scales[e, p].view(torch.uint8).tolist())
                   for p in range(n)]
            check(sorted(got) == sorted(want.get(e, [])), f"{form}: expert {e}'s codes and scales", failed)
            scale = torch.exp2(block_scales[e, :n].float() - 127) if ue8m0 else block_scales[e, :n]
            deq = (codes[e, :n].cpu().float().view(n, -1, 128) * scale[..., None]).view(n, hidden).to(torch.bfloat16)
            expert_out[e, :n] = (deq.float() * (1 + e / 8)).to(torch.bfloat16)
        combined, _, _ = buffer.low_latency_combine(expert_out.to(DEVICE), idx.to(DEVICE), w.to(DEVICE), handle)
        ref_codes, ref_scales = deepep_cast_reference(x, round_scale)
        x_deq = (ref_codes.float().view(tokens, -1, 128) * ref_scales[..., None]).view(tokens, hidden)
        reference = low_latency_reference(x_deq.to(torch.bfloat16), idx, w)
        check(torch.equal(combined.cpu(), reference), f"{form}: the combine of the dequantized rows", failed)


def low_latency_mode(deep_ep, group, world, rank, device, failed):
    options = {} if device == "cuda" else dict(device="host")
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(16, HIDDEN, world, world * EXPERTS_PER_RANK)
    buffer = deep_ep.Buffer(group, 0, hint, low_latency_mode=True, num_qps_per_rank=world, **options)
    counts = [9 - r % 3 for r in range(world)]
    stats = torch.zeros(EXPERTS_PER_RANK, dtype=torch.int32, device=DEVICE)
    total = [0] * EXPERTS_PER_RANK
    side = torch.randn(64, 64, device=DEVICE)
    for seed, hook, zero_copy in ((20, False, False), (21, True, False), (22, False, True), (23, True, True)):
        got = low_latency_round_trip(buffer, world, rank, seed, counts, 16, failed, hook=hook, zero_copy=zero_copy,
                                     stats=stats, between=lambda: side @ side)
        total = [a + b for a, b in zip(total, got)]
    check(stats.cpu().tolist() == total, "cumulative_local_expert_recv_stats adds every dispatch's counts", failed)
    # Two dispatches in flight (two micro-batches, SGLang's two-batch overlap),
    # each combined after the other's dispatch: DeepEP's two buffers.
    experts = world * EXPERTS_PER_RANK
    xa, wa, ia = rank_inputs(world, rank, 30, counts[rank])
    xb, wb, ib = rank_inputs(world, rank, 31, 3)
    ra, _, ha, _, _ = buffer.low_latency_dispatch(xa, ia, 16, experts, use_fp8=False)
    rb, _, hb, _, _ = buffer.low_latency_dispatch(xb, ib, 16, experts, use_fp8=False)
    check(ha.op is not hb.op and ra.data_ptr() != rb.data_ptr(), "two dispatches in flight use the two buffers", failed)
    for e in range(EXPERTS_PER_RANK):
        ra[e] = (ra[e].float() * (1 + e / 8)).to(torch.bfloat16)
        rb[e] = (rb[e].float() * (1 + e / 8)).to(torch.bfloat16)
    ca, _, _ = buffer.low_latency_combine(ra, ia, wa, ha)
    cb, _, _ = buffer.low_latency_combine(rb, ib, wb, hb)
    check(torch.equal(ca.cpu(), low_latency_reference(xa, ia, wa)), "micro-batch A", failed)
    check(torch.equal(cb.cpu(), low_latency_reference(xb, ib, wb)), "micro-batch B", failed)
    # Token counts that vary per call reuse the two ops: no module fetched.
    stats_before = epjit.cache.stats()
    fetched = lambda s: s["memory_hits"] + s["disk_hits"] + s["misses"] + s["compiles"]  # noqa: E731
    for n in (1, 16, 0, 5):
        low_latency_round_trip(buffer, world, rank, 40 + n, [n] * world, 16, failed)
    check(fetched(epjit.cache.stats()) == fetched(stats_before), "varying low-latency token counts fetched a module",
          failed)
    # What epjit does not do is refused with the reason.
    x, w, idx = rank_inputs(world, rank, 50, 3)
    low_latency_fp8(buffer, world, rank, failed)
    try:
        buffer.low_latency_dispatch(x, idx, 16, experts, use_fp8=True, round_scale=False, use_ue8m0=True)
    except AssertionError as error:
        check("round_scale" in str(error), f"UE8M0 without round_scale: {error}", failed)
    else:
        failed.append("use_ue8m0 without round_scale was not refused (DeepEP asserts)")
    for kwargs, words in ((dict(use_fp8=False, dispatch_wait_recv_cost_stats=torch.zeros(world, world)),
                           ["dispatch_wait_recv_cost_stats"]),):
        try:
            buffer.low_latency_dispatch(x, idx, 16, experts, **kwargs)
        except NotImplementedError as error:
            check(all(word in str(error) for word in words), f"refusal: {error}", failed)
        else:
            failed.append(f"low_latency_dispatch({kwargs}) was not refused")
    try:
        buffer.low_latency_dispatch(x, idx, 2, experts, use_fp8=False)
    except ValueError as error:
        check("num_max_dispatch_tokens_per_rank=2" in str(error), f"too many tokens: {error}", failed)
    else:
        failed.append("3 tokens with num_max_dispatch_tokens_per_rank=2 were not refused")
    buffer.clean_low_latency_buffer(16, HIDDEN, experts)
    buffer._close()


def two_batches_overlapped(buffer, world, rank, failed):
    """Two micro-batches in flight, as SGLang's two-batch overlap and DeepSeek's
    prefill schedule run the normal mode: dispatch A, dispatch B, combine A,
    combine B, each combine that batch's rows (A's experts x 2, B's x 3). The
    second batch in flight builds the shape's second op once (later rounds
    fetch no kernel module); a third dispatch in flight raises and leaves the
    other two to combine right."""
    hidden = 96  # a shape of its own: its ops are built here
    experts = world * EXPERTS_PER_RANK

    def dispatch(seed, counts):
        x, w, idx = rank_inputs(world, rank, seed, counts[rank])
        x = x[:, :hidden].contiguous()
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
        recv_x, _, recv_w, _, handle, _ = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=idx, topk_weights=w)
        want = expected_receive(world, rank, seed, counts)
        check(recv_x.shape[0] == len(want) and all(torch.equal(recv_x[i].cpu(), r[2][:hidden].cpu())
                                                   for i, r in enumerate(want)),
              f"batch {seed}: the rows in source order", failed)
        return x, in_rank, recv_x, handle

    def combine(batch, factor, what):
        x, in_rank, recv_x, handle = batch
        out, _, _ = buffer.combine((recv_x.float() * factor).to(torch.bfloat16), handle)
        want = (x.float() * factor).to(torch.bfloat16).float() * in_rank.sum(1).float()[:, None]
        check(torch.equal(out.cpu(), want.to(torch.bfloat16).cpu()), f"{what}: that batch's rows, summed", failed)

    ops_before = len(buffer._op_tokens)
    a = dispatch(80, [13] * world)
    b = dispatch(81, [6 + r for r in range(world)])
    combine(a, 2, "combine A after dispatch B")
    combine(b, 3, "combine B")
    check(len(buffer._op_tokens) - ops_before == 2, f"two batches in flight built {len(buffer._op_tokens) - ops_before} "
          "ops (expected 2: the shape's first and its second)", failed)
    before = modules_fetched()
    for round_seed in (82, 84):  # the same order again: no new op
        a, b = dispatch(round_seed, [5 + r for r in range(world)]), dispatch(round_seed + 1, [11] * world)
        combine(b, 3, f"round {round_seed}: combine B first")
        combine(a, 2, f"round {round_seed}: then A")
    c, d = dispatch(90, [4] * world), dispatch(91, [7] * world)
    try:
        dispatch(92, [9] * world)
    except ValueError as error:
        check("2 dispatches of this shape await their combines" in str(error) and "combine one of them first"
              in str(error), f"a third batch in flight: {error}", failed)
    else:
        failed.append("a third dispatch in flight was not refused")
    combine(c, 2, "combine C after the refused third")
    combine(d, 3, "combine D")
    check(modules_fetched() == before, f"later rounds fetched {modules_fetched() - before} kernel modules", failed)


def worst_tokens_in_a_cuda_graph(buffer, world, rank, failed):
    """num_worst_tokens as a CUDA graph uses it: layout, dispatch and combine captured
    once with static inputs, then replayed with other tokens and routings written
    into them; each replay's output must be that call's (copies summed)."""
    tokens = 9
    worst = tokens * world
    static_x, static_w, static_idx = (t.clone() for t in rank_inputs(world, rank, 60, tokens))
    experts = world * EXPERTS_PER_RANK

    def step():
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(static_idx, experts)
        recv_x, _, _, _, handle, _ = buffer.dispatch(
            static_x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=static_idx, topk_weights=static_w, num_worst_tokens=worst)
        out, _, _ = buffer.combine(recv_x, handle)
        return out, in_rank

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # the op built and warm, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_in_rank = step()
    for seed in (61, 62, 63):
        x, w, idx = rank_inputs(world, rank, seed, tokens)
        static_x.copy_(x)
        static_w.copy_(w)
        static_idx.copy_(idx)
        torch.distributed.barrier()  # every rank's inputs written before any replays
        graph.replay()
        torch.cuda.synchronize()
        want = (x.float() * static_in_rank.sum(1).float()[:, None]).to(torch.bfloat16)
        check(torch.equal(static_out.cpu(), want.cpu()), f"graph replay {seed}: combine of that call's rows", failed)


def refusals(deep_ep, group, buffer, world, rank, failed):
    def raises(call, kind, words, what):
        try:
            call()
        except kind as error:
            check(all(w in str(error) for w in words), f"{what}: {error}", failed)
        else:
            failed.append(f"{what}: no error")
    raises(lambda: deep_ep.Buffer(group, 0, 0, enable_shrink=True), NotImplementedError,
           ["enable_shrink", "not served"], "rank masks")
    raises(lambda: deep_ep.Buffer(None), ValueError, ["group"], "no group")
    for name, args in (("low_latency_update_mask_buffer", (0, True)), ("low_latency_query_mask_buffer", (None,)),
                       ("low_latency_clean_mask_buffer", ())):
        raises(lambda: getattr(buffer, name)(*args), NotImplementedError, [name, "not served", "rank mask"], name)
    raises(lambda: buffer.internode_dispatch(None), ValueError, ["internode_dispatch", "one node", "dispatch"],
           "internode_dispatch on one node")
    x, w, idx = rank_inputs(world, rank, 5, 6)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, world * EXPERTS_PER_RANK)
    first = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                            topk_idx=idx, topk_weights=w)
    buffer.combine(first[0], first[4])
    raises(lambda: buffer.combine(first[0], first[4]), ValueError, ["combined already", "not the latest"],
           "combine of a handle already combined")
    raises(lambda: first[4][0], NotImplementedError, ["handle[0]", "not served", "pass the handle back"],
           "reading the normal-mode handle")
    raises(lambda: tuple(first[4]), NotImplementedError, ["handle[0]", "not served"], "unpacking the handle")
    raises(lambda: buffer.dispatch(x.float(), num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w),
           ValueError, ["bfloat16"], "f32 x")


def modules_fetched():
    """Kernel modules fetched so far (a new op fetches one, compiled or cached)."""
    stats = epjit.cache.stats()
    return stats["memory_hits"] + stats["disk_hits"] + stats["misses"] + stats["compiles"]


def as_rank(device, world, rank, store, results, body, environment=None):
    """One rank process: joins the gloo group, installs epjit.deep_ep, runs
    body(deep_ep, dist, failed), and puts its failures ("" when none) on `results`,
    with any exception and the checks that failed before it."""
    global DEVICE
    DEVICE = device
    failed = []
    try:
        import torch.distributed as dist
        if device == "cuda":
            torch.cuda.set_device(gpu_of(rank))
        os.environ.update(environment or {})
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        assert epjit.deep_ep.install()
        import deep_ep
        body(deep_ep, dist, failed)
        dist.barrier()
        dist.destroy_process_group()
        results.put("; ".join(f"rank {rank}: {f}" for f in failed))
    except Exception as error:  # reported by the test, with the checks that failed before it
        import traceback
        results.put(f"rank {rank}: {type(error).__name__}: {error} (failed before it: {failed or 'none'})\n"
                    f"{traceback.format_exc()}")


def rank_main(device, world, rank, store, results):
    def body(deep_ep, dist, failed):
        from deep_ep.utils import EventOverlap  # noqa: F401  (what Megatron-LM imports)
        options = {} if device == "cuda" else dict(device="host")
        buffer = deep_ep.Buffer(dist.group.WORLD, int(1e8), 0, **options)
        deep_ep.Buffer.set_num_sms(24)
        counts = [37 - r % 2 for r in range(world)]
        layout_and_round_trip(deep_ep, buffer, world, rank, 1, counts, failed)  # the layout in torch ops: no op yet
        check(len(buffer._layout_ops) == 1, "get_dispatch_layout runs the op's kernel once an op exists", failed)
        layout_and_round_trip(deep_ep, buffer, world, rank, 2, [1] * world, failed, alignment=1)
        layout_and_round_trip(deep_ep, buffer, world, rank, 3, [0] + [5] * (world - 1), failed)
        cached_dispatch_and_backward(buffer, world, rank, 4, counts, failed)
        worst_tokens_fp8_and_events(buffer, world, rank, 6, [11 + r for r in range(world)], failed)
        # Sizes that vary per call reuse the op and its kernels: no module is
        # fetched (a new op would fetch one, compiled or cached) or compiled.
        before = modules_fetched()
        for n in (3, 37, 1, 20):
            layout_and_round_trip(deep_ep, buffer, world, rank, 10 + n, [n] * world, failed)
        check(modules_fetched() == before, f"varying token counts fetched {modules_fetched() - before} kernel modules",
              failed)
        two_batches_overlapped(buffer, world, rank, failed)
        refusals(deep_ep, dist.group.WORLD, buffer, world, rank, failed)
        if device == "cuda":
            worst_tokens_in_a_cuda_graph(buffer, world, rank, failed)
        low_latency_mode(deep_ep, dist.group.WORLD, world, rank, device, failed)

    as_rank(device, world, rank, store, results, body)


def across_nodes_main(device, world, per_node, rank, store, results):
    """The normal mode over nodes of `per_node` ranks (the communicator's
    gpu_per_node): the layout's tokens per node, the receive order over the whole
    group, the cached handle's forward and backward, fp8 and num_worst_tokens,
    DeepEP's internode_dispatch / internode_combine names, no recompiles, and the
    low-latency mode refused with the reason. Ranks sharing a GPU move the
    off-node legs over the host transport (NCCL takes one rank per GPU)."""
    def body(deep_ep, dist, failed):
        options = {} if device == "cuda" else dict(device="host")
        buffer = deep_ep.Buffer(dist.group.WORLD, int(1e8), 0, gpu_per_node=per_node, **options)
        counts = [23 - r % 3 for r in range(world)]
        layout_and_round_trip(deep_ep, buffer, world, rank, 1, counts, failed, per_node=per_node)
        layout_and_round_trip(deep_ep, buffer, world, rank, 2, [0] + [7] * (world - 1), failed, alignment=3,
                              per_node=per_node)
        cached_dispatch_and_backward(buffer, world, rank, 4, counts, failed)
        worst_tokens_fp8_and_events(buffer, world, rank, 6, [11 + r for r in range(world)], failed)
        before = modules_fetched()
        for n in (3, 1, 20):
            layout_and_round_trip(deep_ep, buffer, world, rank, 10 + n, [n] * world, failed, per_node=per_node)
        check(modules_fetched() == before, f"varying token counts fetched {modules_fetched() - before} kernel modules",
              failed)
        two_batches_overlapped(buffer, world, rank, failed)
        # DeepEP's internode names run the same calls.
        x, w, idx = rank_inputs(world, rank, 7, 9)
        per_rank, per_rdma, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, world * EXPERTS_PER_RANK)
        recv_x, _, recv_w, _, handle, _ = buffer.internode_dispatch(
            x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma, is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
        want = expected_receive(world, rank, 7, [9] * world)
        check(recv_x.shape[0] == len(want) and all(torch.equal(recv_x[i].cpu(), r[2].cpu())
                                                   for i, r in enumerate(want)),
              "internode_dispatch: the rows in source order", failed)
        combined, _, _ = buffer.internode_combine(recv_x, handle, topk_weights=recv_w)
        check(torch.equal(combined.cpu(), (x.float() * in_rank.sum(1).float()[:, None]).to(torch.bfloat16).cpu()),
              "internode_combine: copies summed", failed)
        try:
            buffer.low_latency_dispatch(x, idx, 16, world * EXPERTS_PER_RANK, use_fp8=False)
        except NotImplementedError as error:
            check("across nodes" in str(error) and "within a node" in str(error), f"low latency: {error}", failed)
        else:
            failed.append("the low-latency mode across nodes was not refused")
        buffer._close()

    as_rank(device, world, rank, store, results, body,
            environment={"EPJIT_INTERNODE_TRANSPORT": "host"} if device == "cuda" else None)


@pytest.mark.parametrize("world,per_node", [(4, 2), (3, 1)])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_deep_ep_normal_mode_across_nodes(device, world, per_node):
    skip_unless_ranks_fit(device, world)
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        run_rank_processes(across_nodes_main, world, lambda r: (device, world, per_node, r, store), timeout=600)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_deep_ep_normal_mode_on_epjit(device, world):
    skip_unless_ranks_fit(device, world)
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        run_rank_processes(rank_main, world, lambda r: (device, world, r, store), timeout=600)


def test_deep_ep_names_after_install():
    import importlib.util
    import sys
    if importlib.util.find_spec("deep_ep") is not None and sys.modules.get("deep_ep") is not epjit.deep_ep:
        pytest.skip("a real DeepEP is installed here; install() leaves it in place")
    assert epjit.deep_ep.install()
    import deep_ep
    from deep_ep import Buffer, Config, EventOverlap, topk_idx_t  # noqa: F401
    from deep_ep.utils import EventHandle  # noqa: F401
    assert deep_ep.Buffer is epjit.deep_ep.Buffer and topk_idx_t == torch.int64
    assert Buffer.get_dispatch_config(8).num_sms == Buffer.num_sms
    with pytest.raises(ValueError, match="positive"):
        Config(0)
