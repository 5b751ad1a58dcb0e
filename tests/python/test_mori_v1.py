"""MORI's first (v1) API (`mori.shmem`, `mori.ops.EpDispatchCombineOp`) on epjit, as
vLLM, SGLang and AITER call it: one process per rank over a torch.distributed gloo
group (world 1 and 2; GPU ranks where torch has CUDA, else host ranks with CPU
tensors), each kernel type, MORI's own checks (dispatch against each source token
by get_dispatch_src_token_pos, combine = copies summed per destination rank), and
each framework's call sequence replayed in its order. Needs torch: skipped, with
the reason, where it is absent.
"""
import gc
import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="epjit.mori works on torch tensors; torch is not installed here")

import epjit  # noqa: E402
import epjit.mori  # noqa: E402
from gpu_ranks import gpu_of, run_rank_processes, skip_unless_ranks_fit  # noqa: E402

HIDDEN, TOPK, EPR, MAX_TOKENS, TOKENS = 384, 4, 5, 37, 29
DEVICE = "cpu"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def rank_inputs(world, rank, seed, tokens=TOKENS, dtype=torch.bfloat16):
    """Rank `rank`'s inputs of call `seed` (any rank can rebuild any rank's)."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16).to(dtype)
    w = torch.rand(tokens, TOPK, generator=g)
    idx = torch.stack([torch.randperm(world * EPR, generator=g)[:TOPK] for _ in range(tokens)]).to(torch.int32)
    if tokens > 3:
        idx[1, 1] = idx[1, 0]   # a duplicate expert: counted twice, sent once
        idx[2, 3] = -1          # a masked slot
    return x.to(DEVICE), w.to(DEVICE), idx.reshape(tokens, TOPK).to(DEVICE)


def unique_ranks(idx):
    return torch.tensor([len({e // EPR for e in row if e >= 0}) for row in idx.tolist()], dtype=torch.float32)


def copies_summed(x, idx):
    """x summed once per distinct destination rank, in f32, rounded once (MORI's
    check_combine_result, exact here since every copy is the same row)."""
    return (x.float() * unique_ranks(idx).to(x.device)[:, None]).to(x.dtype)


class Checks:
    def __init__(self):
        self.failed = []

    def expect(self, ok, what):
        if not ok:
            self.failed.append(what)

    def raises(self, call, kind, words, what):
        try:
            call()
        except kind as error:
            self.expect(words in str(error), f"{what}: raised {error!r}, not about {words!r}")
            return
        except Exception as error:  # the wrong kind
            self.failed.append(f"{what}: raised {type(error).__name__} {error}, expected {kind.__name__}")
            return
        self.failed.append(f"{what}: did not raise")


def config(mori, world, rank, kind="IntraNode", **fields):
    base = dict(data_type=torch.bfloat16, rank=rank, world_size=world, hidden_dim=HIDDEN, scale_dim=0,
                scale_type_size=1, max_token_type_size=4, max_num_inp_token_per_rank=MAX_TOKENS,
                num_experts_per_rank=EPR, num_experts_per_token=TOPK,
                kernel_type=getattr(mori.ops.EpDispatchCombineKernelType, kind), gpu_per_node=8)
    base.update(fields)
    return mori.ops.EpDispatchCombineConfig(**base)


def check_dispatch(op, world, seed, out, out_w, out_idx, total, checks, what, dtype=torch.bfloat16):
    """MORI's check_dispatch_result: each received row is its source's token."""
    sync()
    pos = op.get_dispatch_src_token_pos().cpu()
    n = int(total[0].item())
    checks.expect(len(pos) == n and len(torch.unique(pos)) == n, f"{what}: {len(pos)} positions for {n} rows")
    sources = {r: rank_inputs(world, r, seed, dtype=dtype) for r in range(world)}
    for i, p in enumerate(pos.tolist()):
        src_rank, src_tok = op.decode_send_flat_idx(p)
        x, w, idx = sources[src_rank]
        checks.expect(torch.equal(out[i].cpu().view(torch.uint8), x[src_tok].cpu().view(torch.uint8)),
                      f"{what}: row {i} is not token {src_tok} of rank {src_rank}")
        checks.expect(torch.equal(out_w[i].cpu(), w[src_tok].cpu()), f"{what}: row {i} weights")
        checks.expect(torch.equal(out_idx[i].cpu(), idx[src_tok].cpu()), f"{what}: row {i} indices")
    return n


def check_local_count(op, rank, out_idx, n, checks, what):
    sync()
    want = torch.zeros(EPR, dtype=torch.int32)
    for row in out_idx[:n].cpu().tolist():
        for e in row:
            if e >= 0 and e // EPR == rank:
                want[e % EPR] += 1
    checks.expect(torch.equal(op.local_expert_count.cpu(), want),
                  f"{what}: local_expert_count {op.local_expert_count.tolist()} != {want.tolist()}")


def check_combine(out, out_w, x, w, idx, checks, what):
    sync()
    n = x.shape[0]
    checks.expect(torch.equal(out[:n].cpu().view(torch.uint8), copies_summed(x, idx).cpu().view(torch.uint8)),
                  f"{what}: combine != x summed per destination rank")
    if out_w is not None:
        want = w.cpu() * unique_ranks(idx)[:, None]
        checks.expect(torch.allclose(out_w[:n].cpu(), want, rtol=1e-6, atol=1e-6), f"{what}: combined weights")


def round_trip(mori, world, rank, kind, seed, checks):
    """One dispatch and combine of each kernel type, as MORI's run_test_once."""
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank, kind))
    x, w, idx = rank_inputs(world, rank, seed)
    if kind == "AsyncLL":
        out, out_w, _, out_idx, total = op.dispatch_send(x, w, None, idx)
        op.dispatch_recv(call_local_expert_count=True)
    else:
        out, out_w, _, out_idx, total = op.dispatch(x, w, None, idx, call_local_expert_count=True)
    n = check_dispatch(op, world, seed, out, out_w, out_idx, total, checks, kind)
    check_local_count(op, rank, out_idx, n, checks, kind)
    if kind == "AsyncLL":
        back, back_w = op.combine_send(out[:n], out_w, idx)
        op.combine_recv()
    else:
        back, back_w = op.combine(out[:n], out_w, idx)
        checks.raises(lambda: op.dispatch_recv(), ValueError, "only supports AsyncLL", f"{kind}: dispatch_recv")
    check_combine(back, back_w, x, w, idx, checks, kind)
    op.close()


def dtype_from_each_call(mori, world, rank, fp8, checks):
    """data_type is only the first dtype: bf16, fp8 with scales, f32 and bf16 again
    through one op (an epjit op per dispatch dtype, built on first use)."""
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank, scale_dim=3, scale_type_size=4))
    for seed, dtype in ((11, torch.bfloat16), (12, fp8), (13, torch.float32), (14, torch.bfloat16)):
        x, w, idx = rank_inputs(world, rank, seed, dtype=dtype)
        scales = (torch.arange(TOKENS * 3, dtype=torch.float32) + rank * 1000 + seed).reshape(TOKENS, 3).to(DEVICE)
        out, out_w, out_s, out_idx, total = op.dispatch(x, w, scales, idx)
        n = check_dispatch(op, world, seed, out, out_w, out_idx, total, checks, f"{dtype} dispatch", dtype=dtype)
        checks.expect(out.dtype == dtype and out_s.dtype == torch.float32 and tuple(out_s.shape[1:]) == (3,),
                      f"{dtype}: out {out.dtype}, scales {out_s.dtype} {tuple(out_s.shape)}")
        pos = op.get_dispatch_src_token_pos().cpu().tolist()
        for i, p in enumerate(pos):
            src_rank, src_tok = op.decode_send_flat_idx(p)
            want = torch.arange(3, dtype=torch.float32) + src_rank * 1000 + seed + src_tok * 3
            checks.expect(torch.equal(out_s[i].cpu(), want), f"{dtype}: scales of row {i}")
        rows = out[:n] if dtype != fp8 else out[:n].to(torch.bfloat16)  # fp8 dispatch, bf16 combine (vLLM's)
        back, _ = op.combine(rows, None, idx)
        want_x = x if dtype != fp8 else x.to(torch.bfloat16)
        checks.expect(back.dtype == rows.dtype, f"{dtype}: combine returned {back.dtype}, not {rows.dtype}")
        check_combine(back, None, want_x, w, idx, checks, f"{dtype} combine")
    # fp8 rows into combine: summed in f32 from the exact widening, returned as fp8
    x, w, idx = rank_inputs(world, rank, 15, dtype=torch.bfloat16)
    x = x.to(fp8)
    out, _, _, _, total = op.dispatch(x, w, None, idx)
    back, _ = op.combine(out[: int(total[0].item())], None, idx)
    sync()
    want = (x.float() * unique_ranks(idx).to(x.device)[:, None]).to(torch.bfloat16).to(fp8)
    checks.expect(back.dtype == fp8 and torch.equal(back.cpu().view(torch.uint8), want.cpu().view(torch.uint8)),
                  "fp8 combine input: sums in f32, rounded to bf16, returned as fp8")
    checks.raises(lambda: op.dispatch(x.to(torch.float32)[:, : HIDDEN - 128], w, None, idx), epjit.Error,
                  "hidden_dim", "narrower rows")
    op.close()
    small = mori.ops.EpDispatchCombineOp(config(mori, world, rank, max_token_type_size=2))
    checks.raises(lambda: small.dispatch(x.to(torch.float32), w, None, idx), epjit.Error, "max_token_type_size",
                  "f32 past max_token_type_size 2")
    small.close()


def zero_copy(mori, world, rank, checks):
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank, use_external_inp_buf=False))
    x, w, idx = rank_inputs(world, rank, 21)
    out, out_w, _, out_idx, total = op.dispatch(x, w, None, idx)
    n = int(total[0].item())
    buf = op.get_registered_combine_input_buffer(torch.bfloat16)
    checks.expect(tuple(buf.shape) == (op.max_num_tokens_to_recv(), HIDDEN), f"registered buffer {tuple(buf.shape)}")
    checks.raises(lambda: op.combine(out[:n].clone(), out_w, idx), epjit.Error, "registered combine input buffer",
                  "zero-copy combine of another tensor")
    buf[:n].copy_(out[:n])
    back, back_w = op.combine(buf, out_w, idx)
    check_combine(back, back_w, x, w, idx, checks, "zero-copy")
    op.close()


def routing_handles(mori, world, rank, checks):
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank))
    x, w, idx = rank_inputs(world, rank, 31)
    out, _, _, _, total, handle = op.dispatch(x, w, None, idx, return_routing=True)
    n = int(total[0].item())
    sync()
    pos = op.get_dispatch_src_token_pos()
    checks.expect(torch.equal(handle.disp_tok_id_to_src_tok_id_local[:n].cpu(), pos.cpu()),
                  "handle: disp_tok_id_to_src_tok_id_local != get_dispatch_src_token_pos")
    dest = handle.disp_dest_tok_id_map[: TOKENS * TOPK].reshape(TOKENS, TOPK).cpu()
    for t, row in enumerate(idx.cpu().tolist()):
        for j, e in enumerate(row):
            got = -1 if dest[t, j] < 0 else op.decode_send_flat_idx(int(dest[t, j]))[0]
            checks.expect(e < 0 or got == e // EPR, f"handle: dest map [{t}, {j}] names rank {got}")
    back, _ = op.combine(out[:n], None, idx, routing=handle)
    check_combine(back, None, x, w, idx, checks, "recorded")
    for label, used in (("replay", handle),
                        ("from_tensors", mori.ops.EpDispatchRoutingHandle.from_tensors(handle.tensors(), TOKENS))):
        x2 = (x.float() * 2 + 1).to(torch.bfloat16)
        out2, _, _, _, total2 = op.dispatch(x2, w, None, idx, routing=used)
        checks.expect(int(total2[0].item()) == n, f"{label}: {int(total2[0].item())} rows, recorded {n}")
        back2, _ = op.combine(out2[:n], None, idx, routing=used)
        check_combine(back2, None, x2, w, idx, checks, label)
    checks.raises(lambda: op.dispatch(x[:-1], w[:-1], None, idx[:-1], routing=handle), ValueError,
                  "cur_rank_num_token", "replay of another token count")
    op.close()
    ll = mori.ops.EpDispatchCombineOp(config(mori, world, rank, "IntraNodeLL"))
    checks.raises(lambda: ll.dispatch(x, w, None, idx, return_routing=True), NotImplementedError,
                  "only IntraNode and InterNodeV1", "routing under IntraNodeLL")
    ll.close()


def standard_moe(mori, world, rank, checks):
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank))
    x, w, idx = rank_inputs(world, rank, 41)
    packed, counts, src_info, layout = op.dispatch_standard_moe(x, w, None, idx)
    sync()
    per_expert = world * MAX_TOKENS
    checks.expect(tuple(packed.shape) == (EPR, per_expert, HIDDEN) and layout.numel() == 0, "packed layout")
    sources = {r: rank_inputs(world, r, 41) for r in range(world)}
    want_counts = [0] * EPR
    for r, (_, _, ridx) in sources.items():
        for row in ridx.tolist():
            for e in row:
                if e >= 0 and e // EPR == rank:
                    want_counts[e % EPR] += 1
    checks.expect(counts.cpu().tolist() == want_counts, f"std-MoE counts {counts.tolist()} != {want_counts}")
    for e in range(EPR):
        for j in range(int(counts[e])):
            src_rank, src_tok = op.decode_send_flat_idx(int(src_info[e, j]))
            sx, _, sidx = sources[src_rank]
            checks.expect(torch.equal(packed[e, j].cpu(), sx[src_tok].cpu()) and
                          rank * EPR + e in sidx[src_tok].tolist(), f"std-MoE packed [{e}, {j}]")
    out, out_w = op.combine_standard_moe(packed, None, idx)  # identity experts
    sync()
    want = (x.float() * torch.where(idx >= 0, w, torch.zeros_like(w)).sum(1, keepdim=True)).to(torch.bfloat16)
    checks.expect(out_w is None and torch.allclose(out[:TOKENS].float().cpu(), want.float().cpu(), rtol=2e-2,
                                                   atol=2e-2), "std-MoE combine != sum_k w_k x")
    op.close()


def refusals(mori, world, rank, checks):
    checks.raises(lambda: mori.ops.EpDispatchCombineOp(config(mori, world, rank, quant_type="fp4_blockwise")),
                  ValueError, "fp4_blockwise", "fp4 combine quant")
    checks.raises(lambda: mori.ops.EpDispatchCombineOp(config(mori, world, rank, world_size=world + 1)),
                  ValueError, "do not match", "config of another world")
    op = mori.ops.EpDispatchCombineOp(config(mori, world, rank))
    checks.raises(lambda: op.combine(torch.zeros(1, HIDDEN, dtype=torch.bfloat16, device=DEVICE), None,
                                     torch.zeros(1, TOPK, dtype=torch.int32, device=DEVICE)),
                  epjit.Error, "without a dispatch", "combine first")
    x, w, idx = rank_inputs(world, rank, 51)
    out, _, _, out_idx, total = op.dispatch(x, w, None, idx)
    n = int(total[0].item())
    checks.raises(lambda: op.combine(out[:n], None, out_idx[:n] if n != TOKENS else out_idx[: n - 1]), ValueError,
                  "ROCm/mori#475", "combine with the received indices")
    op.combine(out[:n], None, idx)
    checks.expect(op.backend_name.startswith("epjit ("), f"backend_name {op.backend_name!r}")
    checks.expect(op.max_num_tokens_to_send() == world * MAX_TOKENS and
                  op.max_num_tokens_to_recv_per_rank() == MAX_TOKENS, "max_num_tokens_to_*")
    op.close()


def lifecycle(mori, world, rank, checks, cycles=50):
    """Ops built, used and closed over and over keep the communicator's memory flat:
    what is alive after the first cycle is what is alive after the last."""
    comm = mori.shmem._communicator("lifecycle")._epjit
    x, w, idx = rank_inputs(world, rank, 61)
    before = None
    for cycle in range(cycles):
        if cycle == 1:
            before = comm.symmetric_bytes
        op = mori.ops.EpDispatchCombineOp(config(mori, world, rank))
        out, _, _, _, total = op.dispatch(x, w, None, idx)
        op.combine(out[: int(total[0].item())], None, idx)
        sync()
        op.close()
        del op, out, total   # views of an op's results keep its memory (docs/PYTHON.md)
    gc.collect()
    checks.expect(comm.symmetric_bytes == before,
                  f"{cycles} ops built and closed: symmetric memory {before} -> {comm.symmetric_bytes} bytes")


def register_group(name, group):
    """torch's _register_process_group, as each framework calls it; the replays run
    in one process, so a name an earlier replay registered is kept."""
    try:
        torch._C._distributed_c10d._resolve_process_group(name)
    except Exception:
        torch._C._distributed_c10d._register_process_group(name, group)


def shmem_init(mori, name, **epjit_options):
    """MORI's call takes the device from torch (its current GPU where torch has
    one); host ranks on a GPU host name theirs."""
    if DEVICE == "cpu":
        epjit_options["device"] = "host"
    mori.shmem.shmem_torch_process_group_init(name, **epjit_options)


# -- the frameworks' call sequences ----------------------------------------------------
def vllm_sequence(mori, world, rank, fp8, checks):
    """vLLM's MoriAll2AllManager + MoriPrepareAndFinalize, FP8 dispatch and BF16
    combine: the group registered as "mori", the config from _make_all2all_kwargs,
    prepare() and finalize() with their keyword calls."""
    import torch.distributed as dist
    register_group("mori", dist.group.WORLD)
    shmem_init(mori, "mori")
    kwargs = dict(rank=rank, world_size=world, data_type=fp8, hidden_dim=HIDDEN, scale_dim=1, scale_type_size=4,
                  max_token_type_size=torch.bfloat16.itemsize, max_num_inp_token_per_rank=MAX_TOKENS,
                  num_experts_per_rank=EPR, num_experts_per_token=TOPK, warp_num_per_block=16, block_num=80,
                  kernel_type=mori.ops.EpDispatchCombineKernelType.IntraNode, rdma_block_num=0,
                  gpu_per_node=min(8, world))
    handle = mori.ops.EpDispatchCombineOp(mori.ops.EpDispatchCombineConfig(**kwargs))
    for seed in (71, 72):  # two forward passes through the cached handle
        a1, topk_weights, topk_ids = rank_inputs(world, rank, seed)
        scale = (a1.float().abs().amax(dim=1, keepdim=True) / 448.0).clamp(min=1e-6)   # per-token fp8 quant
        q = (a1.float() / scale).to(fp8)
        out, out_w, out_s, out_idx, recv = handle.dispatch(input=q, weights=topk_weights, scales=scale,
                                                           indices=topk_ids)
        # the experts: dequantize (identity weights), written as bf16 rows
        fused = (out.float() * out_s.float()).to(torch.bfloat16)
        output = torch.empty(a1.shape[0], HIDDEN, dtype=torch.bfloat16, device=DEVICE)
        combined, _ = handle.combine(input=fused, weights=topk_weights, indices=topk_ids)
        output.copy_(combined[: a1.shape[0]], non_blocking=True)
        sync()
        deq = (q.float() * scale).to(torch.bfloat16)
        check_combine(output, None, deq, topk_weights, topk_ids, checks, f"vLLM pass {seed}")
    mori.shmem.shmem_finalize()


def sglang_sequence(mori, world, rank, fp8, checks):
    """SGLang's MoriEPDispatcher (normal mode, SGLANG_MORI_FP8_DISP unset): config
    with data_type fp8 and bf16 params, bf16 tokens dispatched positionally,
    combine(hidden_states, None, topk_ids)[0]."""
    import torch.distributed as dist
    register_group("mori", dist.group.WORLD)
    shmem_init(mori, "mori")
    cfg = mori.ops.EpDispatchCombineConfig(
        rank=rank, world_size=world, data_type=fp8, hidden_dim=HIDDEN, scale_dim=1,
        scale_type_size=torch.float32.itemsize, max_token_type_size=torch.bfloat16.itemsize,
        max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR, num_experts_per_token=TOPK,
        warp_num_per_block=16, block_num=80, kernel_type=mori.ops.EpDispatchCombineKernelType.IntraNode,
        rdma_block_num=0, num_qp_per_pe=2)
    op = mori.ops.EpDispatchCombineOp(cfg)
    x, topk_weights, topk_ids = rank_inputs(world, rank, 81)
    hidden, recv_w, recv_s, recv_ids, recv_count = op.dispatch(x, topk_weights, None, topk_ids)
    checks.expect(recv_s is None, "SGLang: scales returned for a call without scales")
    combined = op.combine(hidden, None, topk_ids)[0]   # the whole [max_recv, hidden] rows, as SGLang passes
    check_combine(combined, None, x, topk_weights, topk_ids, checks, "SGLang")
    mori.shmem.shmem_finalize()


def aiter_sequence(mori, world, rank, checks):
    """AITER's test_mori path: the WORLD group as "default", an odd token bound,
    positional dispatch, a barrier, the received rows sliced by the device count,
    experts that apply their routing weights, combine(out, None, topk_ids)."""
    import torch.distributed as dist
    register_group("default", dist.group.WORLD)
    shmem_init(mori, "default")
    cfg = mori.ops.EpDispatchCombineConfig(
        data_type=torch.bfloat16, rank=rank, world_size=world, hidden_dim=HIDDEN, scale_dim=0, scale_type_size=0,
        max_token_type_size=torch.bfloat16.itemsize, max_num_inp_token_per_rank=MAX_TOKENS,
        num_experts_per_rank=EPR, num_experts_per_token=TOPK)
    op = mori.ops.EpDispatchCombineOp(cfg)
    dist.barrier()
    tokens, topk_weights, topk_ids = rank_inputs(world, rank, 91)
    out, out_w, _, out_ids, recv = op.dispatch(tokens, topk_weights, None, topk_ids)
    sync()
    moe_input, moe_weights, moe_ids = out[:recv], out_w[:recv], out_ids[:recv]
    local = (moe_ids >= rank * EPR) & (moe_ids < (rank + 1) * EPR)
    expert_out = (moe_input.float() * torch.where(local, moe_weights, torch.zeros_like(moe_weights))
                  .sum(1, keepdim=True)).to(torch.bfloat16)
    dist.barrier()
    combined, _ = op.combine(expert_out, None, topk_ids)
    dist.barrier()
    sync()
    want = tokens.float() * torch.where(topk_ids >= 0, topk_weights, torch.zeros_like(topk_weights)).sum(1, True)
    checks.expect(torch.allclose(combined[: tokens.shape[0]].float(), want, rtol=2e-2, atol=2e-2),
                  "AITER: combine != the routing-weighted MoE output")
    mori.shmem.shmem_finalize()


def body(world, rank, checks):
    import torch.distributed as dist
    import mori
    probe = mori.ops.EpDispatchCombineOp(config(mori, world, rank))
    fp8 = getattr(torch, "float8_" + epjit._target_fp8(probe._any_leg()._op.target))  # the target's flavour
    probe.close()
    checks.expect(mori.shmem.shmem_mype() == rank and mori.shmem.shmem_npes() == world, "shmem_mype/npes")
    for kind in ("IntraNode", "IntraNodeLL", "AsyncLL", "InterNode", "InterNodeV1", "InterNodeV1LL"):
        round_trip(mori, world, rank, kind, 1 + len(kind), checks)
    dtype_from_each_call(mori, world, rank, fp8, checks)
    zero_copy(mori, world, rank, checks)
    routing_handles(mori, world, rank, checks)
    standard_moe(mori, world, rank, checks)
    refusals(mori, world, rank, checks)
    lifecycle(mori, world, rank, checks)
    mori.shmem.shmem_finalize()
    checks.raises(lambda: mori.ops.EpDispatchCombineOp(config(mori, world, rank)), RuntimeError,
                  "shmem_torch_process_group_init", "an op after shmem_finalize")
    vllm_sequence(mori, world, rank, fp8, checks)
    sglang_sequence(mori, world, rank, fp8, checks)
    aiter_sequence(mori, world, rank, checks)
    dist.barrier()


def internode_body(world, rank, checks, gpu_per_node):
    """Nodes of gpu_per_node consecutive host ranks: MORI's internode kinds run
    epjit's internode kernels; the intranode kinds are refused."""
    import mori
    for kind in ("InterNodeV1", "InterNodeV1LL", "InterNode"):
        op = mori.ops.EpDispatchCombineOp(config(mori, world, rank, kind, gpu_per_node=gpu_per_node))
        x, w, idx = rank_inputs(world, rank, 101 + len(kind))
        out, out_w, _, out_idx, total = op.dispatch(x, w, None, idx, call_local_expert_count=True)
        n = check_dispatch(op, world, 101 + len(kind), out, out_w, out_idx, total, checks, kind)
        check_local_count(op, rank, out_idx, n, checks, kind)
        back, back_w = op.combine(out[:n], out_w, idx)
        check_combine(back, back_w, x, w, idx, checks, kind)
        op.close()
    checks.raises(lambda: mori.ops.EpDispatchCombineOp(config(mori, world, rank, "IntraNode",
                                                              gpu_per_node=gpu_per_node)),
                  ValueError, "within one node", "IntraNode across nodes")
    mori.shmem.shmem_finalize()


def rank_main(device, world, rank, store, gpu_per_node, results):
    global DEVICE
    DEVICE = device
    checks = Checks()
    try:
        import torch.distributed as dist
        if device == "cuda":
            torch.cuda.set_device(gpu_of(rank))
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        assert epjit.mori.install()
        import mori
        register_group("default", dist.group.WORLD)
        if gpu_per_node:
            shmem_init(mori, "default", gpu_per_node=gpu_per_node)
            internode_body(world, rank, checks, gpu_per_node)
        else:
            shmem_init(mori, "default")
            body(world, rank, checks)
        dist.destroy_process_group()
        results.put("; ".join(f"rank {rank}: {f}" for f in checks.failed))
    except Exception as error:
        import traceback
        earlier = "; ".join(checks.failed)
        results.put(f"rank {rank}: {type(error).__name__}: {error} (failed before it: {earlier or 'none'})\n"
                    f"{traceback.format_exc()}")


def run_world(device, world, gpu_per_node=None):
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        run_rank_processes(rank_main, world, lambda r: (device, world, r, store, gpu_per_node), timeout=600)


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_mori_v1_api_on_epjit(device, world):
    skip_unless_ranks_fit(device, world)
    run_world(device, world)


def test_mori_v1_across_nodes():
    run_world("cpu", 4, gpu_per_node=2)


def test_v1_names_after_install():
    import importlib.util
    import sys
    if importlib.util.find_spec("mori") is not None and sys.modules.get("mori") is not epjit.mori:
        pytest.skip("a real MORI is installed here; install() leaves it in place")
    assert epjit.mori.install()
    import mori
    from mori.ops import (EpDispatchCombineConfig, EpDispatchCombineKernelType, EpDispatchCombineOp,  # noqa: F401
                          launch_local_expert_count)
    assert importlib.util.find_spec("mori") is not None   # vLLM's has_mori()
    assert str(EpDispatchCombineKernelType.InterNodeV1LL) == "InterNodeV1LL"
    assert EpDispatchCombineKernelType.AsyncLL.value == 4
    cfg = EpDispatchCombineConfig(data_type=torch.bfloat16, rank=0, world_size=1, hidden_dim=HIDDEN, scale_dim=0,
                                  scale_type_size=0, max_token_type_size=2, max_num_inp_token_per_rank=8,
                                  num_experts_per_rank=2, num_experts_per_token=2)
    assert (cfg.block_num, cfg.warp_num_per_block, cfg.gpu_per_node, cfg.quant_type) == (80, 8, 8, "none")
    mori.shmem.shmem_finalize()
    with pytest.raises(RuntimeError, match="shmem_torch_process_group_init"):
        EpDispatchCombineOp(cfg)
    with pytest.raises(RuntimeError, match="not served by epjit"):
        mori.shmem.shmem_malloc(64)


def test_launch_local_expert_count_on_raw_pointers():
    from epjit.mori.ops import EpDispatchCombineConfig, launch_local_expert_count
    cfg = EpDispatchCombineConfig(data_type=torch.bfloat16, rank=1, world_size=2, hidden_dim=HIDDEN, scale_dim=0,
                                  scale_type_size=0, max_token_type_size=2, max_num_inp_token_per_rank=8,
                                  num_experts_per_rank=3, num_experts_per_token=2)
    device = "cuda" if torch.cuda.is_available() else "cpu"   # where launch_local_expert_count takes pointers
    indices = torch.tensor([[3, 4], [5, 0], [3, 3], [-1, 5], [4, 4]], dtype=torch.int32, device=device)  # last: past total
    total = torch.tensor([4], dtype=torch.int32, device=device)
    counts = torch.full((3,), 77, dtype=torch.int32, device=device)
    launch_local_expert_count(cfg, indices.data_ptr(), total.data_ptr(), counts.data_ptr())
    assert counts.tolist() == [3, 1, 2]
