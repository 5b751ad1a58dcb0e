"""epjit.mori, MORI EPv2's API on epjit, checked against epjit's semantics and
MORI's stated ones: one process per rank (world 1 and 2; GPUs where torch has
them, else host ranks with CPU tensors). Needs torch (MORI's tensors are torch
tensors): skipped, with the reason, where it is absent.
"""
import gc
import pickle

import pytest

torch = pytest.importorskip("torch", reason="epjit.mori works on torch tensors; torch is not installed here")

import epjit  # noqa: E402
import epjit.mori  # noqa: E402
from epjit.mori import cco  # noqa: E402
from epjit.mori.ops.dispatch_combine_v2 import (EpDispatchCombineConfig, EpDispatchCombineOp,  # noqa: E402
                                                EpDispatchRoutingHandle, tuning_configs)
from gpu_ranks import gpu_of, run_rank_processes, skip_unless_ranks_fit  # noqa: E402

HIDDEN, TOPK, EPR, MAX_TOKENS = 512, 4, 6, 40
GPU = False      # set per rank process: CUDA tensors on GPU ranks, else CPU tensors on host ranks
DEVICE = "cpu"


def make_cfg(world, rank, **fields):
    base = dict(rank=rank, world_size=world, hidden_dim=HIDDEN, max_num_inp_token_per_rank=MAX_TOKENS,
                num_experts_per_rank=EPR, num_experts_per_token=TOPK)
    base.update(fields)
    return EpDispatchCombineConfig(**base)


def rank_inputs(world, rank, tokens, seed, dtype=torch.bfloat16):
    """Rank `rank`'s inputs of call `seed` (any rank can rebuild any rank's)."""
    g = torch.Generator().manual_seed(seed * 977 + rank)
    x = torch.randn(tokens, HIDDEN, generator=g).to(dtype)
    w = torch.rand(tokens, TOPK, generator=g)
    idx = torch.stack([torch.randperm(world * EPR, generator=g)[:TOPK] for _ in range(tokens)]).to(torch.int32)
    if tokens > 2:
        idx[1, 1] = idx[1, 0]   # a duplicate expert: MORI counts it twice
        idx[2, 3] = -1          # a masked slot
    return x.to(DEVICE), w.to(DEVICE), idx.reshape(tokens, TOPK).to(DEVICE)


def distinct_ranks(idx):
    """Per token, its ranks in order of first appearance (masked slots skipped)."""
    out = []
    for row in idx.tolist():
        seen = []
        for e in row:
            if e >= 0 and e // EPR not in seen:
                seen.append(e // EPR)
        out.append(seen)
    return out


def identity_expected(x, idx):
    """U copies of x summed in f32 and rounded once (U = distinct destination ranks)."""
    u = torch.tensor([len(r) for r in distinct_ranks(idx)], dtype=torch.float32, device=x.device)
    return (x.float() * u[:, None]).to(x.dtype)


def sync():
    if GPU:
        torch.cuda.synchronize()


class Checks:
    def __init__(self, rank):
        self.rank, self.failed = rank, []

    def expect(self, ok, what):
        if not ok:
            self.failed.append(what)


def check_forward_map_ranks(op, handle, x, idx, checks, rail=None):
    """The handle's (token, k) -> rank * max_recv + slot map names each entry's rank
    (internode v2, rail=(rank, gpu_per_node): a rank of another node is named by
    the rail peer the token went through there)."""
    fwd = handle.disp_dest_tok_id_map.reshape(MAX_TOKENS, TOPK)[: x.shape[0]].tolist()
    for t, row in enumerate(idx.tolist()):
        for j, e in enumerate(row):
            want_rank = -1 if e < 0 else e // EPR
            if rail and want_rank >= 0 and want_rank // rail[1] != rail[0] // rail[1]:
                want_rank = want_rank // rail[1] * rail[1] + rail[0] % rail[1]
            got_rank = -1 if fwd[t][j] < 0 else fwd[t][j] // op.max_recv
            checks.expect(got_rank == want_rank, f"forward map [{t}, {j}] names rank {got_rank}, not {want_rank}")


def raises(call, words):
    """Whether call() raises an epjit.Error whose message holds `words`."""
    try:
        call()
    except epjit.Error as error:
        return words in str(error)
    return False


def round_trip(op, x, w, idx, before_combine=None, **dispatch_kw):
    """dispatch -> before_combine() -> combine. Between a rank's dispatch and its
    combine no peer writes its received rows (a peer's combine waits for this
    rank's), so reads of them belong there."""
    out, out_w, out_s, out_idx, total, handle = op.dispatch(x, w, None, idx, return_routing=True, **dispatch_kw)
    sync()
    if before_combine is not None:
        before_combine()
    n = int(total.item())
    back, back_w = op.combine(out[:n], routing=handle)
    sync()
    return out, out_w, out_idx, n, handle, back, back_w


def replay_identity(op, x, w, idx, routing, what, checks):
    """Replays `routing` with payload x, combines, and checks U * x."""
    out, *_, total = op.dispatch(x, w, None, idx, routing=routing)
    sync()
    back, _ = op.combine(out[: int(total.item())], routing=routing)
    sync()
    checks.expect(torch.equal(back.view(torch.int16), identity_expected(x, idx).view(torch.int16)),
                  f"{what}: combine != U * x")


def body(world, rank, uid_bytes, seed, checks):
    extra = {}
    if GPU:
        torch.cuda.set_device(gpu_of(rank))  # the communicator follows torch's current device
    else:
        extra = dict(device="host")  # epjit's keyword: host ranks
    uid = pickle.loads(uid_bytes)  # MORI's UniqueId travels pickled
    # timeout_seconds (epjit's keyword): a rank whose peer failed gives up instead of waiting forever.
    with cco.Communicator.init(world, rank, uid, per_rank_vmm=1 << 30, timeout_seconds=120, **extra) as comm:
        checks.expect((comm.rank, comm.nranks) == (rank, world), "communicator rank / nranks")
        # bf16 gather: the identity check, summed weights, MORI's expert counts.
        op = EpDispatchCombineOp(make_cfg(world, rank), comm)
        x, w, idx = rank_inputs(world, rank, MAX_TOKENS - rank, seed)

        def count_experts():  # MORI's contract: after dispatch, before combine
            counts = op.local_expert_count()
            want = torch.zeros(EPR, dtype=torch.int64)
            for r in range(world):  # every (token, k) of every rank naming one of my experts, duplicates too
                _, _, their_idx = rank_inputs(world, r, MAX_TOKENS - r, seed)
                for e in their_idx.reshape(-1).tolist():
                    if e >= 0 and e // EPR == rank:
                        want[e % EPR] += 1
            checks.expect(counts.is_cuda == GPU and counts.tolist() == want.tolist(),
                          f"local_expert_count {counts.tolist()} != MORI's rule {want.tolist()}")

        out, out_w, out_idx, n, handle, back, back_w = round_trip(op, x, w, idx, before_combine=count_experts)
        checks.expect(torch.equal(back.view(torch.int16), identity_expected(x, idx).view(torch.int16)),
                      "bf16 gather: combine(dispatch(x)) != U * x")
        u = torch.tensor([len(r) for r in distinct_ranks(idx)], dtype=torch.float32, device=w.device)
        checks.expect(torch.allclose(back_w, w * u[:, None]), "combine's weights are not the summed forwarded ones")
        # The received rows are the next dispatch's once combine ran (a peer may be writing them).
        checks.expect(raises(op.local_expert_count, "before combine()"), "local_expert_count after combine not refused")
        # The handle's maps: slot -> source, and (token, k) -> rank * max_recv + slot.
        src = handle.disp_tok_id_to_src_tok_id_local[:n].tolist()
        checks.expect(len(set(src)) == n and all(0 <= s < world * MAX_TOKENS for s in src), "slot -> source map")
        check_forward_map_ranks(op, handle, x, idx, checks)
        # Replay right after a dispatch (MORI's order), then from_tensors.
        x2 = (x.float() * 0.5).to(torch.bfloat16)
        op.dispatch(x, w, None, idx, return_routing=False)
        replay_identity(op, x2, w, idx, handle, "replay after dispatch", checks)
        rebuilt = EpDispatchRoutingHandle.from_tensors(handle.tensors(), cur_rank_num_token=x.shape[0])
        replay_identity(op, x2, w, idx, rebuilt, "replay of from_tensors", checks)
        # Dropped handles give their routings back; the next ones record into them.
        del handle, rebuilt
        gc.collect()
        for call in range(3):
            x4, w4, idx4 = rank_inputs(world, rank, 13 + call, seed + 9 + call)
            *_, kept, back4, _ = round_trip(op, x4, w4, idx4)
            checks.expect(torch.equal(back4.view(torch.int16), identity_expected(x4, idx4).view(torch.int16)),
                          f"round trip {call} on a recycled routing: combine != U * x")
            replay_identity(op, x4, w4, idx4, kept, f"replay {call} of a recycled routing", checks)
            del kept
        # A handle's maps first read after a later dispatch of other tokens, and after
        # the caller reused its indices' buffer, are still its own call's.
        xa, wa, idxa = rank_inputs(world, rank, 21 - rank, seed + 5)
        caller_idx = idxa.clone()
        *_, na, early, _, _ = round_trip(op, xa, wa, caller_idx)
        xb, wb, idxb = rank_inputs(world, rank, 9 + rank, seed + 6)
        round_trip(op, xb, wb, idxb)
        caller_idx.copy_(idxb[:1].expand_as(caller_idx))
        sync()
        sent_here = sorted(r * MAX_TOKENS + t for r in range(world)
                           for t, ranks in enumerate(distinct_ranks(rank_inputs(world, r, 21 - r, seed + 5)[2]))
                           if rank in ranks)
        checks.expect(int(early.total_recv_token_num.item()) == len(sent_here) == na,
                      f"a handle read late: total_recv_token_num {int(early.total_recv_token_num.item())}, "
                      f"expected {len(sent_here)}")
        checks.expect(sorted(early.disp_tok_id_to_src_tok_id_local[:len(sent_here)].tolist()) == sent_here,
                      "a handle read late: its slot -> source map is not its call's")
        check_forward_map_ranks(op, early, xa, idxa, checks)
        replay_identity(op, xa, wa, idxa, early, "replay of a handle read late", checks)
        del early
        # Expert outputs in a buffer of their own: max_recv rows are read in place (any
        # contiguous shape of them), fewer are copied in.
        for what, expert_rows in (("max_recv rows", lambda o, n: o.clone()),
                                  ("max_recv rows as [max_recv, 1, hidden]", lambda o, n: o.clone().unsqueeze(1)),
                                  ("the received rows", lambda o, n: o[:n].clone())):
            out5, *_, total5 = op.dispatch(xa, wa, None, idxa)
            sync()
            back5, _ = op.combine(expert_rows(out5, int(total5.item())))
            sync()
            checks.expect(torch.equal(back5.view(torch.int16), identity_expected(xa, idxa).view(torch.int16)),
                          f"combine of {what} in a buffer of their own != U * x")
        # A step where no rank has tokens: a handle all the same, its maps empty.
        x0 = torch.zeros(0, HIDDEN, dtype=torch.bfloat16, device=DEVICE)
        w0 = torch.zeros(0, TOPK, dtype=torch.float32, device=DEVICE)
        idx0 = torch.zeros(0, TOPK, dtype=torch.int32, device=DEVICE)
        *_, n0, empty, back0, _ = round_trip(op, x0, w0, idx0)
        checks.expect(n0 == 0 and back0.shape == (0, HIDDEN) and int(empty.total_recv_token_num.item()) == 0,
                      f"no tokens: received {n0}, combined {tuple(back0.shape)}")
        checks.expect(bool((empty.disp_dest_tok_id_map == -1).all()), "no tokens: the forward map names a slot")
        # A handle first read after its op closed: its routing's memory, not the op's.
        *_, nc, closing, _, _ = round_trip(op, x, w, idx)
        op.close()
        checks.expect(int(closing.total_recv_token_num.item()) == nc, "a handle read after close: its count")
        check_forward_map_ranks(op, closing, x, idx, checks)
        del closing
        # f32 gather, and scatter with fp8 quant (a tolerance: the wire is fp8).
        with EpDispatchCombineOp(make_cfg(world, rank, data_type=torch.float32), comm) as op32:
            xf, wf, idxf = rank_inputs(world, rank, 17 + rank, seed + 1, torch.float32)
            *_, back, _ = round_trip(op32, xf, wf, idxf)
            checks.expect(torch.equal(back, identity_expected(xf, idxf)), "f32 gather: combine != U * x")
        for quant in ("fp8_direct_cast", "fp8_blockwise"):
            with EpDispatchCombineOp(make_cfg(world, rank, quant_type=quant), comm) as opq:
                checks.expect(opq.cfg.combine_mode == "scatter", f"{quant} did not force scatter")
                xq, wq, idxq = rank_inputs(world, rank, 23, seed + 2)
                *_, back, _ = round_trip(opq, xq, wq, idxq)
                want = identity_expected(xq, idxq).float()
                err = (back.float() - want).abs().max().item()
                checks.expect(err <= 0.07 * want.abs().max().item(), f"{quant}: error {err} beyond fp8's")
        # A symmetric fp8 op: fp8 in, fp8 out.
        fp8 = torch.float8_e4m3fn
        with EpDispatchCombineOp(make_cfg(world, rank, data_type=fp8), comm) as op8:
            checks.expect(op8.cfg.is_fp8, "fp8 config is_fp8")
            x8, w8, idx8 = rank_inputs(world, rank, 19, seed + 3)
            x8 = x8.to(fp8)
            *_, back, _ = round_trip(op8, x8, w8, idx8)
            u8 = torch.tensor([len(r) for r in distinct_ranks(idx8)], dtype=torch.float32, device=w8.device)
            want = (x8.float() * u8[:, None]).to(torch.bfloat16).to(fp8)
            checks.expect(back.dtype == fp8 and torch.equal(back.view(torch.uint8), want.view(torch.uint8)),
                          "fp8 symmetric: combine != U * x")
        # Scales forwarded (float32, 3 per token), with max_total_recv_tokens.
        cfg = make_cfg(world, rank, scale_dim=3, scale_type_size=4, max_total_recv_tokens=world * 30)
        with EpDispatchCombineOp(cfg, comm) as ops:
            checks.expect(ops.max_recv == cfg.effective_max_recv, "max_recv != effective_max_recv")
            xs, ws, idxs = rank_inputs(world, rank, 11, seed + 4)
            scales = torch.arange(11 * 3, dtype=torch.float32, device=DEVICE).reshape(11, 3) + 1000 * rank
            out, _, out_s, _, total, h = ops.dispatch(xs, ws, scales, idxs, return_routing=True)
            sync()
            checks.expect(int(total.item()) > 0, f"scales: nothing received (total {total})")
            for slot in range(int(total.item())):
                source = int(h.disp_tok_id_to_src_tok_id_local[slot])
                r, t = divmod(source, MAX_TOKENS)
                want_s = torch.arange(t * 3, t * 3 + 3, dtype=torch.float32) + 1000 * r
                checks.expect(torch.equal(out_s[slot].cpu().view(torch.float32), want_s), f"scales of slot {slot}")
            ops.combine(out[: int(total.item())], routing=h)
            sync()
        # Scales as MORI's test_op.py passes them: 56 one-byte scales per token as
        # 14 int32 words; they come back in that dtype and shape ([max_recv, 14] int32).
        cfg = make_cfg(world, rank, scale_dim=56, scale_type_size=1)
        with EpDispatchCombineOp(cfg, comm) as ops:
            checks.expect(ops.backend_name == f"epjit ({ops.capabilities['target']})", ops.backend_name)
            xs, ws, idxs = rank_inputs(world, rank, 9, seed + 6)
            words = torch.arange(9 * 14, dtype=torch.int32, device=DEVICE).reshape(9, 14) * 7919 + 100000 * rank
            out, _, out_s, _, total, h = ops.dispatch(xs, ws, words, idxs, return_routing=True)
            sync()
            checks.expect(out_s.dtype == torch.int32 and tuple(out_s.shape) == (ops.max_recv, 14),
                          f"int32 scales came back as {out_s.dtype} {tuple(out_s.shape)}")
            for slot in range(int(total.item())):
                r, t = divmod(int(h.disp_tok_id_to_src_tok_id_local[slot]), MAX_TOKENS)
                want = torch.arange(t * 14, t * 14 + 14, dtype=torch.int32) * 7919 + 100000 * r
                checks.expect(torch.equal(out_s[slot].cpu(), want), f"int32 scales of slot {slot}")
            ops.combine(out[: int(total.item())], routing=h)
            sync()
        # Standard MoE: packed per expert, weighted back, combined.
        with EpDispatchCombineOp(make_cfg(world, rank, enable_std_moe=True), comm) as opm:
            xm, wm, idxm = rank_inputs(world, rank, 29, seed + 5)
            out, out_w, _, _, total, h = opm.dispatch(xm, wm, None, idxm, return_routing=True)
            packed, count, src = opm.convert_dispatch_output()
            sync()
            checks.expect(int(count.sum()) > 0 or int(total.item()) == 0, "std-MoE packed nothing")
            rows = opm.convert_combine_input(h)  # identity experts: packed_x left as is
            back, _ = opm.combine(rows[: int(total.item())], routing=h)
            sync()
            want = torch.empty_like(xm)
            for t, ranks in enumerate(distinct_ranks(idxm)):
                partials = []
                for r in ranks:
                    acc = torch.zeros(HIDDEN, dtype=torch.float32, device=xm.device)
                    for j, e in enumerate(idxm[t].tolist()):
                        if e >= 0 and e // EPR == r:
                            acc += wm[t, j] * xm[t].float()
                    partials.append(acc.to(torch.bfloat16).float())
                total_row = torch.zeros(HIDDEN, dtype=torch.float32, device=xm.device)
                for p in partials:
                    total_row += p
                want[t] = total_row.to(torch.bfloat16)
            checks.expect(torch.equal(back.view(torch.int16), want.view(torch.int16)),
                          "std-MoE: combine(convert_combine_input) != sum_k w_k x")
        # Graph capture of dispatch -> combine (GPUs).
        if GPU:
            with EpDispatchCombineOp(make_cfg(world, rank), comm) as opg:
                xg, wg, ig = rank_inputs(world, rank, MAX_TOKENS, seed + 6)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    out, *_ = opg.dispatch(xg, wg, None, ig)
                    opg.combine(out)
                torch.cuda.synchronize()
                comm.barrier()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out, *_ = opg.dispatch(xg, wg, None, ig)
                    back, _ = opg.combine(out)
                for replay in range(5):
                    fresh = rank_inputs(world, rank, MAX_TOKENS, seed + 100 + replay)
                    for dst, src_t in zip((xg, wg, ig), fresh):
                        dst.copy_(src_t)
                    torch.cuda.synchronize()
                    comm.barrier()
                    graph.replay()
                    torch.cuda.synchronize()
                    checks.expect(torch.equal(back.view(torch.int16), identity_expected(xg, ig).view(torch.int16)),
                                  f"graph replay {replay}: combine != U * x")
                    comm.barrier()
                del graph
            # A dropped handle's routing is recorded into again only from the stream it
            # was last dispatched on: from another, the new call's copies into it could
            # run while reads its old handle enqueued there still do.
            with EpDispatchCombineOp(make_cfg(world, rank), comm) as ops2:
                xs, ws, ids = rank_inputs(world, rank, 11, seed + 7)
                first = round_trip(ops2, xs, ws, ids)[4]
                first_routing = ops2._op.route_map(first._routing).data_ptr()  # the op keeps its memory
                del first
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    on_side = round_trip(ops2, xs, ws, ids)[4]
                checks.expect(ops2._op.route_map(on_side._routing).data_ptr() != first_routing,
                              "a routing dropped on one stream was recorded into from another")
                del on_side
                torch.cuda.current_stream().wait_stream(side)
                again = round_trip(ops2, xs, ws, ids)[4]
                checks.expect(ops2._op.route_map(again._routing).data_ptr() == first_routing,
                              "a routing dropped on this stream was not recorded into again")
                del again
        # Left to the garbage collector after the communicator's block (MORI's examples do).
        leftover = EpDispatchCombineOp(make_cfg(world, rank), comm)
        lx, lw, li = rank_inputs(world, rank, 5, seed + 7)
        leftover.dispatch(lx, lw, None, li)
        sync()
    del leftover
    gc.collect()


def internode_body(world, rank, uid_bytes, seed, checks, gpu_per_node, kernel):
    """Nodes of gpu_per_node ranks (host ranks, the host transport between nodes):
    the round trip, the forward map's ranks, a replay right after the dispatch and
    one of a handle rebuilt from its tensors (its map ends with the off-node counts;
    v2 refuses it: MORI's tensors do not hold the forwarding ranks' slots).
    kernel "auto_straddling": auto with its crossover between the ranks' counts
    (MAX_TOKENS - rank), each dispatch passing the largest, so every rank runs v2."""
    uid = pickle.loads(uid_bytes)
    fields, dispatch_kw = dict(internode_kernel=kernel), {}
    if kernel == "auto_straddling":
        fields = dict(internode_kernel="auto", internode_auto_ll_max_tokens=MAX_TOKENS - 1)
        dispatch_kw = dict(max_tokens_across_ranks=MAX_TOKENS)
    v2 = kernel != "v2_ll"
    with cco.Communicator.init(world, rank, uid, device="host", gpu_per_node=gpu_per_node,
                               timeout_seconds=120) as comm:
        op = EpDispatchCombineOp(make_cfg(world, rank, gpu_per_node=gpu_per_node, **fields), comm)
        checks.expect(op.capabilities["internode"], "capabilities say internode")
        x, w, idx = rank_inputs(world, rank, MAX_TOKENS - rank, seed)
        out, out_w, out_idx, n, handle, back, back_w = round_trip(op, x, w, idx, **dispatch_kw)
        checks.expect(torch.equal(back.view(torch.int16), identity_expected(x, idx).view(torch.int16)),
                      f"internode {kernel} bf16 gather: combine(dispatch(x)) != U * x")
        check_forward_map_ranks(op, handle, x, idx, checks, rail=(rank, gpu_per_node) if v2 else None)
        x2 = (x.float() * 0.5).to(torch.bfloat16)
        op.dispatch(x, w, None, idx, return_routing=False, **dispatch_kw)
        replay_identity(op, x2, w, idx, handle, "internode replay after dispatch", checks)
        # A new payload: rows a replay failed to send would show as the last call's.
        x3 = (x.float() * 0.25).to(torch.bfloat16)
        rebuilt = EpDispatchRoutingHandle.from_tensors(handle.tensors(), cur_rank_num_token=x.shape[0])
        if v2:
            try:
                op.dispatch(x3, w, None, idx, routing=rebuilt, **dispatch_kw)
                checks.expect(False, "v2 replayed a handle rebuilt from MORI's tensors")
            except epjit.Error as error:
                checks.expect("forwarding slots" in str(error), f"v2 from_tensors refusal says why: {error}")
            # Every rank refused before its kernels ran: the op is still in step.
            replay_identity(op, x3, w, idx, handle, "internode replay after a refused one", checks)
        else:
            replay_identity(op, x3, w, idx, rebuilt, "internode replay of from_tensors", checks)
        op.close()


def rank_main(device, world, rank, uid_bytes, seed, gpu_per_node, kernel, results):
    global GPU, DEVICE
    GPU, DEVICE = device == "cuda", device
    checks = Checks(rank)
    try:
        if gpu_per_node:
            internode_body(world, rank, uid_bytes, seed, checks, gpu_per_node, kernel)
        else:
            body(world, rank, uid_bytes, seed, checks)
        results.put("; ".join(f"rank {rank}: {f}" for f in checks.failed))
    except Exception as error:  # reported by the test, with the checks that failed before it
        import traceback
        earlier = "; ".join(checks.failed)
        results.put(f"rank {rank}: {type(error).__name__}: {error} (failed before it: {earlier or 'none'})\n"
                    f"{traceback.format_exc()}")


def run_world(device, world, gpu_per_node=None, kernel="v2_ll"):
    uid = pickle.dumps(cco.get_unique_id())
    run_rank_processes(rank_main, world, lambda r: (device, world, r, uid, 1, gpu_per_node, kernel), timeout=300)


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_mori_api_on_epjit(device, world):
    skip_unless_ranks_fit(device, world)
    run_world(device, world)


@pytest.mark.parametrize("kernel", ["v2_ll", "v2", "auto_straddling"])
@pytest.mark.parametrize("world,gpu_per_node", [(4, 2), (3, 1)])
def test_mori_api_across_nodes(world, gpu_per_node, kernel):
    run_world("cpu", world, gpu_per_node, kernel)


def test_config_follows_mori():
    cfg = make_cfg(2, 0, quant_type="fp8_blockwise", max_total_recv_tokens=50)
    assert cfg.combine_mode == "scatter" and cfg.kernel_backend == "epjit"
    assert cfg.effective_max_recv == 2 * 25 and cfg.combine_scale_dim == (HIDDEN + 127) // 128
    assert cfg.token_nbytes == HIDDEN * 2 and not cfg.is_fp8
    with pytest.raises(ValueError, match="quant_type"):
        make_cfg(2, 0, quant_type="int4")
    with pytest.raises(ValueError, match="set together"):
        make_cfg(2, 0, dispatch_data_type=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="kernel_backend"):
        make_cfg(2, 0, kernel_backend="cuda-magic")
    assert make_cfg(2, 0, kernel_backend="flydsl").kernel_backend == "epjit"


def test_tuning_lookup_is_epjit_table():
    found = tuning_configs.lookup(8, 7168, 8, dtype=torch.bfloat16, target="sm90")
    assert all(found[k] > 0 for k in ("dispatch_block_num", "combine_block_num", "warp_num_per_block",
                                      "combine_warp_num_per_block"))
    cfg = epjit.EpDispatchCombineConfig(rank=0, world_size=8, hidden_dim=7168, max_num_inp_token_per_rank=4096,
                                        num_experts_per_rank=8, num_experts_per_token=8, target="sm90")
    assert found["schedule"] == [tuple(row) for row in cfg.resolved_schedule()]
    with pytest.raises(epjit.Error, match="not one epjit knows"):
        tuning_configs.lookup(8, 7168, 8, target="gfx9999")


def test_install_names_mori():
    import importlib.util
    import sys
    if importlib.util.find_spec("mori") is not None and sys.modules.get("mori") is not epjit.mori:
        pytest.skip("a real MORI is installed here; install() leaves it in place")
    assert epjit.mori.install()
    from mori.ops.dispatch_combine_v2 import EpDispatchCombineOp as Imported
    import mori.cco
    assert Imported is EpDispatchCombineOp and mori.cco.Communicator is cco.Communicator
    # MORI's top-level names are its v1 API (test_mori_v1.py), never EPv2's classes under v1's names.
    from mori.ops import EpDispatchCombineConfig as V1Config, EpDispatchCombineOp as V1Op
    assert V1Op is not EpDispatchCombineOp and V1Config is not EpDispatchCombineConfig
    assert V1Op.__module__ == "epjit.mori.ops.dispatch_combine"
