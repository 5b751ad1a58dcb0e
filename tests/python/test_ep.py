"""The Python op on host ranks (Python threads, and processes): the
identity-expert check across dtypes and modes, bad inputs, the cache."""
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import epjit

HIDDEN, TOPK, EPR, MAX_TOKENS = 256, 3, 4, 19


def make_inputs(rank, world, tokens, dtype, seed=7, masked=False):
    """masked: about a third of the index slots are -1 ("no expert"), and every
    fourth token is masked entirely."""
    rng = np.random.default_rng(seed * 1000 + rank)
    x = rng.normal(0, 1, (tokens, HIDDEN)).astype(np.float32)
    if dtype == "bf16":
        x = x.astype(ml_dtypes.bfloat16)
    weights = rng.random((tokens, TOPK), dtype=np.float32)
    rows = [rng.choice(world * EPR, TOPK, replace=False) for _ in range(tokens)]
    indices = np.array(rows, dtype=np.int32).reshape(tokens, TOPK)
    if masked:
        indices[rng.random(indices.shape) < 0.33] = -1
        indices[3::4] = -1
    return x, weights, indices


def identity_expected(x, indices, quant, target_fp8):
    """U copies of x summed in f32 in destination order (through fp8 under quant), rounded."""
    out = np.empty(x.shape, dtype=np.float32)
    for t in range(x.shape[0]):
        ranks = []
        for e in indices[t]:
            if e >= 0 and e // EPR not in ranks:
                ranks.append(e // EPR)
        if not ranks:  # routed nowhere: nothing comes back
            out[t] = 0
            continue
        c = x[t].astype(np.float32)
        if quant == "fp8_direct_cast":
            c = c.astype(target_fp8).astype(np.float32)
        acc = c.copy()
        for _ in ranks[1:]:
            acc = (acc + c).astype(np.float32)
        out[t] = acc
    return out.astype(x.dtype)


def check_delivered(op, rank, received, tokens_out, w_out, idx_out, padding):
    """deliver_received: the received rows, their top-k as local ids (-1 for other
    ranks' experts and -1 slots) and those entries' weights (0 elsewhere); `padding`
    rows past the received count (a worst-case row count) keep their bytes, with -1
    and 0. Every array poisoned first."""
    rows = min(received + padding, op.capacity)
    poison_row = np.arange(HIDDEN, dtype=np.float32).astype(tokens_out.dtype)
    got_x = np.empty((rows, HIDDEN), dtype=tokens_out.dtype)
    got_x[:] = poison_row
    got_ids = np.full((rows, TOPK), 12345, dtype=np.int64)
    got_w = np.full((rows, TOPK), np.nan, dtype=np.float32)
    op.deliver_received(got_x, got_ids, weights=got_w)
    np.testing.assert_array_equal(got_x[:received].view(np.uint8), np.asarray(tokens_out)[:received].view(np.uint8))
    assert (got_x[received:].view(np.uint8) == np.broadcast_to(poison_row, got_x[received:].shape).view(np.uint8)).all()
    experts = np.asarray(idx_out)[:received].astype(np.int64)
    local = experts - rank * EPR
    mine = (experts >= 0) & (local >= 0) & (local < EPR)
    np.testing.assert_array_equal(got_ids[:received], np.where(mine, local, -1))
    np.testing.assert_array_equal(got_w[:received], np.where(mine, np.asarray(w_out)[:received], 0.0))
    assert (got_ids[received:] == -1).all() and (got_w[received:] == 0).all()
    # The rows alone (a replayed dispatch's caller), and the checks at the boundary.
    only_x = np.zeros((received, HIDDEN), dtype=tokens_out.dtype)
    op.deliver_received(only_x)
    np.testing.assert_array_equal(only_x.view(np.uint8), got_x[:received].view(np.uint8))
    with pytest.raises(epjit.Error, match="local_experts"):
        op.deliver_received(got_x, got_ids[:, :1])
    with pytest.raises(epjit.Error, match="capacity"):
        op.deliver_received(np.zeros((op.capacity + 1, HIDDEN), dtype=tokens_out.dtype))


def run_rank(world, rank, uid, dtype, mode, quant, target, calls, results, masked=False, gpu_per_node=None,
             internode_kernel="auto", auto_ll_max_tokens=512, pass_largest=False, split=False):
    try:
        comm = epjit.Communicator.init(world, rank, uid, target=target, gpu_per_node=gpu_per_node)
        config = epjit.EpDispatchCombineConfig(
            rank=rank, world_size=world, hidden_dim=HIDDEN, max_num_inp_token_per_rank=MAX_TOKENS,
            num_experts_per_rank=EPR, num_experts_per_token=TOPK, data_type=dtype, combine_mode=mode,
            quant_type=quant, gpu_per_node=gpu_per_node, internode_kernel=internode_kernel,
            internode_auto_ll_max_tokens=auto_ll_max_tokens)
        with epjit.EpDispatchCombineOp(config, comm) as op:
            for call, tokens in enumerate(calls):
                n = max(0, tokens - rank % 2)
                x, w, idx = make_inputs(rank, world, n, dtype, seed=call, masked=masked)
                largest = dict(max_tokens_across_ranks=tokens) if pass_largest else {}
                if split:  # the halves, with work of the caller's between them
                    tokens_out, w_out, _, idx_out, total = op.dispatch_send(x, w, None, idx, **largest)
                    np.linalg.norm(x.astype(np.float32))
                    op.dispatch_recv()
                else:
                    tokens_out, w_out, _, idx_out, total = op.dispatch(x, w, None, idx, **largest)
                op.synchronize()
                received = int(total[0])
                # Per local expert, the received tokens naming it (once each), host and device.
                want_counts = [0] * EPR
                for row in np.asarray(idx_out[:received]):
                    for e in set(int(v) for v in row):
                        if e >= 0 and e // EPR == rank:
                            want_counts[e % EPR] += 1
                assert op.local_expert_counts() == want_counts
                on_device = op.local_expert_counts(on_device=True)
                op.synchronize()
                assert on_device.dtype == np.int32 and on_device.tolist() == want_counts
                assert op.received_counts() == (received, want_counts)
                alignment = 2 + call  # odd and even multiples
                assert op.received_counts(expert_alignment=alignment) == (
                    received, [-(-c // alignment) * alignment for c in want_counts])
                if gpu_per_node is None:
                    check_delivered(op, rank, received, tokens_out, w_out, idx_out, padding=call % 3)
                expert = op.combine_input() if mode == "gather" else np.zeros_like(tokens_out)
                expert[:received] = tokens_out[:received]  # identity experts
                into_caller = gpu_per_node is None and call % 2 == 1
                if split:
                    op.combine_send(expert, w_out)
                    np.linalg.norm(x.astype(np.float32))
                    out, out_w = op.combine_recv()
                elif into_caller:  # the caller's arrays, poisoned first
                    own = np.full((n, HIDDEN), np.nan, dtype=np.float32).astype(x.dtype)
                    own_w = np.full((n, TOPK), np.nan, dtype=np.float32)
                    # The received rows alone: received_counts() read their count.
                    out, out_w = op.combine(expert[:received], w_out[:received], output=own, output_weights=own_w)
                    assert out is own and out_w is own_w
                    w_sum = np.zeros((n, TOPK), dtype=np.float32)  # each token's weights back from each of its ranks
                    for t in range(n):
                        for r in {int(e) // EPR for e in idx[t] if e >= 0}:
                            w_sum[t] += w[t]
                    np.testing.assert_array_equal(own_w, w_sum)
                else:
                    out, out_w = op.combine(expert, w_out)
                op.check()
                # After combine the received rows are the next dispatch's (a peer may be writing them).
                try:
                    op.local_expert_counts()
                    raise AssertionError("local_expert_counts after combine was not refused")
                except epjit.Error as refusal:
                    assert "before combine()" in str(refusal), refusal
                fp8 = ml_dtypes.float8_e4m3fnuz if target == "host-gfx942" else ml_dtypes.float8_e4m3fn
                want = identity_expected(x, idx, quant, fp8)
                assert out.shape == (n, HIDDEN)
                np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
        comm.destroy()
        results[rank] = None
    except Exception as error:  # reported by the test
        results[rank] = f"rank {rank}: {type(error).__name__}: {error}"


def run_threads(world, **kwargs):
    uid = epjit.Communicator.get_unique_id()
    results = [None] * world
    threads = [threading.Thread(target=run_rank, args=(world, r, uid), kwargs=dict(results=results, **kwargs))
               for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r for r in results if r] == []


def on_rank_threads(world, body, target="host", gpu_per_node=None):
    """body(rank, comm) on `world` Python threads, a rank each on a new communicator
    (nodes of gpu_per_node ranks when given); fails with what any rank raised."""
    uid = epjit.Communicator.get_unique_id()
    results = [None] * world

    def rank(r):
        try:
            comm = epjit.Communicator.init(world, r, uid, target=target, gpu_per_node=gpu_per_node)
            body(r, comm)
            comm.destroy()
        except Exception as error:  # reported by the test
            results[r] = f"rank {r}: {type(error).__name__}: {error}"

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r for r in results if r] == []


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("dtype,mode,quant,target", [
    ("bf16", "gather", "none", "host"),
    ("f32", "gather", "none", "host"),
    ("bf16", "scatter", "none", "host"),
    ("bf16", "scatter", "fp8_direct_cast", "host-gfx942"),
])
def test_identity_experts_on_python_threads(world, dtype, mode, quant, target):
    run_threads(world, dtype=dtype, mode=mode, quant=quant, target=target, calls=[19, 0, 5])

@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("mode,quant,target", [
    ("gather", "none", "host"),
    ("scatter", "fp8_direct_cast", "host-gfx942"),
])
def test_split_calls_from_python(world, mode, quant, target):
    # dispatch_send/dispatch_recv and combine_send/combine_recv give the
    # one-phase call's bits (identity_expected); numpy outputs are final once
    # the receive half returns.
    run_threads(world, dtype="bf16", mode=mode, quant=quant, target=target, calls=[MAX_TOKENS, 0, 5], split=True)


def test_split_calls_across_nodes_from_python():
    run_threads(4, dtype="bf16", mode="gather", quant="none", target="host", calls=[MAX_TOKENS, 3], gpu_per_node=2,
                internode_kernel="v2", split=True)



@pytest.mark.parametrize("kernel", ["v2_ll", "v2"])
@pytest.mark.parametrize("world,gpu_per_node,mode", [(4, 2, "gather"), (3, 1, "scatter")])
def test_internode_from_python(world, gpu_per_node, mode, kernel):
    """Nodes of gpu_per_node ranks, joined through the host transport."""
    run_threads(world, dtype="bf16", mode=mode, quant="none", target="host", calls=[19, 0, 5],
                gpu_per_node=gpu_per_node, internode_kernel=kernel)


def test_internode_auto_with_ranks_on_both_sides_of_its_crossover():
    """DP attention: even ranks bring 19 tokens, odd ones 18, auto's crossover is 18.
    Each passes the call's largest count, so all run v2; without it the host
    transport refuses the unpaired transfers and says what to pass."""
    run_threads(4, dtype="bf16", mode="gather", quant="none", target="host", calls=[19, 5, 19],
                gpu_per_node=2, auto_ll_max_tokens=18, pass_largest=True)
    with pytest.raises(AssertionError, match="max_tokens_across_ranks"):
        run_threads(4, dtype="bf16", mode="gather", quant="none", target="host", calls=[19],
                    gpu_per_node=2, auto_ll_max_tokens=18)


def test_minus_one_indices_route_nowhere():
    run_threads(2, dtype="bf16", mode="gather", quant="none", target="host", calls=[19, 7], masked=True)
    run_threads(2, dtype="bf16", mode="scatter", quant="fp8_direct_cast", target="host-gfx942", calls=[12],
                masked=True)


def _process_rank(world, rank, uid, queue):
    results = [None] * world
    run_rank(world, rank, uid, "bf16", "gather", "none", "host", [7, 3], results)
    queue.put(results[rank])


def std_moe_rank(world, rank, uid, results):
    """std-MoE from Python with identity experts: every received token once per
    local expert, summed back per rank (rounded once), then over ranks; and the
    received rows' origins name the rows they are."""
    try:
        comm = epjit.Communicator.init(world, rank, uid, target="host")
        config = epjit.EpDispatchCombineConfig(
            rank=rank, world_size=world, hidden_dim=HIDDEN, max_num_inp_token_per_rank=MAX_TOKENS,
            num_experts_per_rank=EPR, num_experts_per_token=TOPK, data_type="bf16", enable_std_moe=True)
        with epjit.EpDispatchCombineOp(config, comm) as op:
            for call, tokens in enumerate([MAX_TOKENS, 5, 0, 11]):
                n = max(0, tokens - rank % 2)
                x, w, idx = make_inputs(rank, world, n, "bf16", seed=40 + call)
                recv, recv_w, _, recv_idx, total = op.dispatch(x, w, None, idx)
                origins = op.received_origins()
                packed, counts, sources = op.std_moe_pack()
                op.synchronize()
                received = int(total[0])
                for i in range(received):  # each received row is its origin's token
                    source, token = divmod(int(origins[i, 0]), MAX_TOKENS)
                    sx, _, _ = make_inputs(source, world, max(0, tokens - source % 2), "bf16", seed=40 + call)
                    np.testing.assert_array_equal(np.asarray(recv[i]).view(np.uint16), sx[token].view(np.uint16))
                locals_of = [sorted({int(e) % EPR for e in recv_idx[i] if e // EPR == rank}) for i in range(received)]
                assert np.asarray(counts).tolist() == [sum(e in l for l in locals_of) for e in range(EPR)]
                for e in range(EPR):
                    rows = np.asarray(sources[e, :int(counts[e])])
                    assert sorted(rows.tolist()) == [i for i in range(received) if e in locals_of[i]]
                    np.testing.assert_array_equal(np.asarray(packed[e, :int(counts[e])]).view(np.uint16),
                                                  np.asarray(recv[rows]).view(np.uint16))
                out, _ = op.std_moe_combine(packed, recv_w)  # identity experts: packed rows as outputs
                op.check()
                want = np.empty((n, HIDDEN), dtype=np.float32)
                for t in range(n):
                    per_rank = {}
                    for e in idx[t]:
                        per_rank.setdefault(int(e) // EPR, set()).add(int(e))
                    acc = None
                    for r in dict.fromkeys(int(e) // EPR for e in idx[t]):  # first-appearance order
                        c = x[t].astype(np.float32)
                        s = c.copy()
                        for _ in range(len(per_rank[r]) - 1):
                            s = (s + c).astype(np.float32)
                        s = s.astype(ml_dtypes.bfloat16).astype(np.float32)
                        acc = s if acc is None else (acc + s).astype(np.float32)
                    want[t] = acc
                np.testing.assert_array_equal(np.asarray(out).view(np.uint16),
                                              want.astype(ml_dtypes.bfloat16).view(np.uint16))
        comm.destroy()
        results[rank] = None
    except Exception as error:  # reported by the test
        results[rank] = f"rank {rank}: {type(error).__name__}: {error}"


def run_rank_threads(rank_fn, world):
    """rank_fn(world, rank, uid, results) on a Python thread per rank; each
    leaves None or its failure in results[rank]."""
    uid = epjit.Communicator.get_unique_id()
    results = [None] * world
    threads = [threading.Thread(target=rank_fn, args=(world, r, uid, results)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r for r in results if r] == []


@pytest.mark.parametrize("world", [1, 2])
def test_std_moe_and_origins_from_python(world):
    run_rank_threads(std_moe_rank, world)


def source_order_rank(world, rank, uid, results):
    """receive_order="source": the received rows are rank 0's first, then rank
    1's, ..., each rank's in token order, whatever the threads' timing."""
    try:
        comm = epjit.Communicator.init(world, rank, uid, target="host")
        config = epjit.EpDispatchCombineConfig(
            rank=rank, world_size=world, hidden_dim=HIDDEN, max_num_inp_token_per_rank=MAX_TOKENS,
            num_experts_per_rank=EPR, num_experts_per_token=TOPK, receive_order="source")
        assert config.receive_order == "source"
        with epjit.EpDispatchCombineOp(config, comm) as op:
            for call, tokens in enumerate([MAX_TOKENS, 7, 0, 13]):
                n = max(0, tokens - rank % 2)
                x, w, idx = make_inputs(rank, world, n, "bf16", seed=60 + call)
                identity_round_trip(op, x, w, idx)
                want = []
                for source in range(world):
                    _, _, source_idx = make_inputs(source, world, max(0, tokens - source % 2), "bf16", seed=60 + call)
                    want += [source * MAX_TOKENS + t for t in range(len(source_idx))
                             if rank in {int(e) // EPR for e in source_idx[t] if e >= 0}]
                origins = np.asarray(op.received_origins())
                assert origins[:len(want), 0].tolist() == want, f"call {call}"
        comm.destroy()
        results[rank] = None
    except Exception as error:  # reported by the test
        results[rank] = f"rank {rank}: {type(error).__name__}: {error}"


def test_source_order_from_python():
    run_rank_threads(source_order_rank, 3)
    with pytest.raises(epjit.Error, match="receive_order = 'sorted'"):
        epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=HIDDEN, max_num_inp_token_per_rank=4,
                                      num_experts_per_rank=EPR, num_experts_per_token=TOPK, receive_order="sorted")


def identity_round_trip(op, x, w, idx, **dispatch_options):
    """dispatch, identity experts written into combine_input(), combine; asserts each
    token comes back as U copies of x (bf16, no quant). Returns dispatch's result."""
    result = op.dispatch(x, w, None, idx, **dispatch_options)
    op.synchronize()
    received = int(result[4][0])
    expert = op.combine_input()
    expert[:received] = result[0][:received]
    out, _ = op.combine(expert, result[1])
    op.synchronize()
    want = identity_expected(x, idx, "none", None)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
    return result


OVERLAP_SECONDS = 120  # how long rank 0's two threads may take to meet on the op


def overlap_rank(rank, uid, refused, results):
    """Rank 0: one thread's reset() waits for rank 1 at its barrier while another
    thread of rank 0 calls check() on the same op until it is refused twice; rank 1
    resets once that happened. Then a round trip on both ranks."""
    try:
        comm = epjit.Communicator.init(2, rank, uid, target="host")
        config = epjit.EpDispatchCombineConfig(rank=rank, world_size=2, hidden_dim=HIDDEN,
                                               max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR,
                                               num_experts_per_token=TOPK)
        with epjit.EpDispatchCombineOp(config, comm) as op:
            if rank == 0:
                reset_failure = ["reset() never ran"]
                deadline = time.monotonic() + OVERLAP_SECONDS

                def reset_until_it_runs():  # it may find the check() thread's call running first
                    while time.monotonic() < deadline:
                        try:
                            op.reset()
                            reset_failure[0] = None
                            return
                        except epjit.Error as error:
                            reset_failure[0] = str(error)
                            if "reset on rank 0 while another thread's check runs" not in str(error):
                                return

                resetting = threading.Thread(target=reset_until_it_runs)
                resetting.start()
                refusals = []
                # Bounded by time, not by a count of calls: on a loaded host the
                # resetting thread may not run at all during many thousand checks.
                while time.monotonic() < deadline:
                    try:
                        op.check()
                    except epjit.Error as error:
                        refusals.append(str(error))
                        if len(refusals) == 2:
                            break
                refused.set()
                resetting.join(timeout=OVERLAP_SECONDS)
                assert len(refusals) == 2, refusals
                for refusal in refusals:
                    assert "check on rank 0 while another thread's reset runs on the same op" in refusal, refusal
                    assert "give each thread its own op" in refusal, refusal
                assert reset_failure[0] is None, reset_failure[0]
            else:
                assert refused.wait(timeout=2 * OVERLAP_SECONDS)
                op.reset()
            identity_round_trip(op, *make_inputs(rank, 2, MAX_TOKENS - 4, "bf16", seed=31))
            op.check()
        comm.destroy()
        results[rank] = None
    except Exception as error:  # reported by the test
        results[rank] = f"rank {rank}: {type(error).__name__}: {error}"


def test_a_call_overlapping_another_threads_call_on_the_op_is_refused():
    """Python threads sharing one op: calls release the GIL, so two can overlap on
    it; the later one raises epjit.Error, and the one it overlapped goes on."""
    uid = epjit.Communicator.get_unique_id()
    refused = threading.Event()
    results = [None] * 2
    threads = [threading.Thread(target=overlap_rank, args=(r, uid, refused, results)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r for r in results if r] == []


def lifecycle_rank(rank, uid, results):
    """Ops built, used and closed over and over on one communicator (MORI's
    test_op_lifecycle, shown by epjit's own count): the communicator's symmetric
    memory comes back to where it was once each op and its result views are gone,
    and a view kept past close() keeps the window alive until it goes."""
    import gc
    try:
        comm = epjit.Communicator.init(2, rank, uid, target="host")
        before = comm.symmetric_bytes
        for round_ in range(5):
            config = epjit.EpDispatchCombineConfig(
                rank=rank, world_size=2, hidden_dim=HIDDEN, max_num_inp_token_per_rank=MAX_TOKENS + 3 * round_,
                num_experts_per_rank=EPR, num_experts_per_token=TOPK)
            op = epjit.EpDispatchCombineOp(config, comm)
            assert comm.symmetric_bytes > before, "an op's window is not counted"
            kept = identity_round_trip(op, *make_inputs(rank, 2, MAX_TOKENS - round_, "bf16", seed=40 + round_))[0]
            op.close()
            del op
            gc.collect()
            assert comm.symmetric_bytes > before, "a result view kept past close() lost its memory"
            del kept
            gc.collect()
            assert comm.symmetric_bytes == before, (f"round {round_}: {comm.symmetric_bytes} symmetric bytes held, "
                                                    f"{before} before")
        comm.destroy()
        results[rank] = None
    except Exception as error:  # reported by the test
        results[rank] = f"rank {rank}: {type(error).__name__}: {error}"


def test_building_and_closing_ops_leaves_the_communicators_memory_as_it_was():
    uid = epjit.Communicator.get_unique_id()
    results = ["never ran"] * 2
    threads = [threading.Thread(target=lifecycle_rank, args=(r, uid, results)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r for r in results if r] == []


def test_identity_experts_on_processes():
    context = multiprocessing.get_context("spawn")
    uid = epjit.Communicator.get_unique_id()
    queue = context.Queue()
    ranks = [context.Process(target=_process_rank, args=(2, r, uid, queue)) for r in range(2)]
    for p in ranks:
        p.start()
    failures = [queue.get(timeout=300) for _ in ranks]
    for p in ranks:
        p.join(timeout=60)
    assert [f for f in failures if f] == []


def single_rank_op(max_tokens=8, **fields):
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target="host")
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=HIDDEN, max_num_inp_token_per_rank=max_tokens,
                                           num_experts_per_rank=EPR, num_experts_per_token=TOPK, **fields)
    return comm, epjit.EpDispatchCombineOp(config, comm)


def test_bad_inputs_raise_naming_the_argument():
    comm, op = single_rank_op()
    x = np.zeros((3, HIDDEN), dtype=ml_dtypes.bfloat16)
    w = np.zeros((3, TOPK), dtype=np.float32)
    idx = np.zeros((3, TOPK), dtype=np.int32)
    with pytest.raises(epjit.Error, match="input is f32"):
        op.dispatch(x.astype(np.float32), w, None, idx)
    with pytest.raises(epjit.Error, match="weights has shape"):
        op.dispatch(x, w[:2], None, idx)
    with pytest.raises(epjit.Error, match="not contiguous"):
        op.dispatch(np.zeros((HIDDEN, 3), dtype=ml_dtypes.bfloat16).T, w, None, idx)
    with pytest.raises(epjit.Error, match="9 tokens"):
        op.dispatch(np.zeros((9, HIDDEN), dtype=ml_dtypes.bfloat16), np.zeros((9, TOPK), np.float32), None,
                    np.zeros((9, TOPK), np.int32))
    # Contiguous, but one element past a 16-byte line: the kernel's vector
    # loads would fault a GPU, so it is refused before the launch.
    off_a_line = np.zeros(3 * HIDDEN + 1, dtype=ml_dtypes.bfloat16)[1:].reshape(3, HIDDEN)
    with pytest.raises(epjit.Error, match=r"dispatch: input is at 0x[0-9a-f]+, which is not a multiple of 16 bytes"):
        op.dispatch(off_a_line, w, None, idx)
    with pytest.raises(epjit.Error, match=r"indices\[0, 0\] = 99"):
        op.dispatch(x, w, None, np.full((3, TOPK), 99, dtype=np.int32))
    with pytest.raises(epjit.Error, match=r"indices\[0, 0\] = -2.*or -1 for none"):
        op.dispatch(x, w, None, np.full((3, TOPK), -2, dtype=np.int32))
    with pytest.raises(epjit.Error, match="without a dispatch"):
        op.combine(np.zeros((op.capacity, HIDDEN), dtype=ml_dtypes.bfloat16))
    with pytest.raises(epjit.Error, match="routing is a str, not an epjit.Routing"):
        op.dispatch(x, w, None, idx, routing="recorded")
    with pytest.raises(epjit.Error, match="record is a int, not an epjit.Routing"):
        op.dispatch(x, w, None, idx, record=7, return_routing=True)
    with pytest.raises(epjit.Error, match="routing is a NoneType, not an epjit.Routing"):
        op.route_map(None)
    with pytest.raises(ValueError, match="dtype epjit knows"):
        epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=8, max_num_inp_token_per_rank=1,
                                      num_experts_per_rank=1, num_experts_per_token=1, data_type="int4")
    op.close()
    comm.destroy()


def test_invalid_config_names_the_rule():
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target="host")
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=60, max_num_inp_token_per_rank=8,
                                           num_experts_per_rank=EPR, num_experts_per_token=TOPK)
    with pytest.raises(epjit.Error, match="hidden_dim = 60"):
        epjit.EpDispatchCombineOp(config, comm)
    comm.destroy()


def test_cache_stats_move(tmp_path):
    before = epjit.cache.stats()
    comm, op = single_rank_op(data_type="f32")  # a kernel this process has not fetched yet
    middle = epjit.cache.stats()
    assert middle["memory_hits"] + middle["disk_hits"] + middle["misses"] > \
        before["memory_hits"] + before["disk_hits"] + before["misses"]
    op.close()
    comm2, op2 = single_rank_op(data_type="f32")  # the same kernel again: a memory hit
    assert epjit.cache.stats()["memory_hits"] == middle["memory_hits"] + 1
    op2.close()
    comm.destroy()
    comm2.destroy()
    manifest = {"targets": ["host"], "kernels": [{"template": "quantize_fp8_direct", "params": {"hidden": 64}}]}
    keys = epjit.cache.warm(manifest)
    assert len(keys) == 1 and len(keys[0]) == 64


def test_targets_choose_their_device_and_the_amd_path_is_reachable():
    names = {row["name"]: row for row in epjit.targets()}
    assert names["gfx942"]["vendor"] == "amd" and names["gfx942"]["wave_size"] == 64
    assert names["gfx1250"]["wave_size"] == 32
    assert epjit.device_for_target("gfx950") == "hip"
    assert epjit.device_for_target("sm90") == "cuda"
    assert epjit.device_for_target("host-gfx942") == "host"
    with pytest.raises(epjit.Error, match="target 'gfx90a' is not known"):
        epjit.device_for_target("gfx90a")
    # An AMD target selects the HIP device. Without an AMD GPU (or without HIP's
    # runtime) that fails with an error saying what is missing, never a crash.
    for kwargs in ({"target": "gfx942"}, {"device": "hip"}):
        try:
            comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), **kwargs)
        except epjit.Error as error:
            assert "HIP" in str(error) or "libamdhip64" in str(error), str(error)
        else:
            assert comm.device == "hip"
            comm.destroy()
    with pytest.raises(epjit.Error, match="host, cuda or hip"):
        epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), device="rocm")


def test_result_views_outlive_close_and_read_the_last_results():
    comm, op = single_rank_op()
    x, w, idx = make_inputs(0, 1, 5, "bf16", seed=11)
    with op:
        tokens, w_out, _, _, total = op.dispatch(x, w, None, idx)
        op.synchronize()
        received = int(total[0])
        expert = op.combine_input()
        expert[:received] = tokens[:received]
        out, _ = op.combine(expert, w_out)
    # The quick start's pattern: the results are read after the with block.
    want = identity_expected(x, idx, "none", None)
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
    assert int(total[0]) == received == 5
    with pytest.raises(epjit.Error, match="closed"):
        op.dispatch(x, w, None, idx)
    del op  # the views still hold the op's memory
    np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
    comm.destroy()  # and it goes with the communicator


def test_calls_hand_out_the_same_arrays_over_the_same_buffers():
    """Results are views of the op's buffers, made into arrays once: a second call
    returns the same objects (combine's output once per token count), and each
    still reads that call's results. Anything but an array is refused by name."""
    comm, op = single_rank_op()
    seen = {}
    for call, tokens in enumerate([5, 3, 5, 1]):
        x, w, idx = make_inputs(0, 1, tokens, "bf16", seed=40 + call)
        received, w_out, _, _, total = op.dispatch(x, w, None, idx)
        op.synchronize()
        assert int(total[0]) == tokens
        out, out_w = op.combine(received, w_out)
        op.synchronize()
        want = identity_expected(x, idx, "none", None)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
        assert out.shape == (tokens, HIDDEN) and out_w.shape == (tokens, TOPK)
        if "received" in seen:
            assert received is seen["received"] and total is seen["total"]
        seen.setdefault("received", received)
        seen.setdefault("total", total)
        if tokens in seen:
            assert out is seen[tokens]
        else:
            assert all(out is not other for other in seen.values())
        seen[tokens] = out
    assert op.received_origins() is op.received_origins()
    x, w, idx = make_inputs(0, 1, 2, "bf16", seed=50)
    with pytest.raises(epjit.Error, match="input is a list, not an array"):
        op.dispatch(x.tolist(), w, None, idx)
    with pytest.raises(epjit.Error, match="weights is a NoneType, not an array"):
        op.dispatch(x, None, None, idx)
    with pytest.raises(epjit.Error, match="never handed out"):
        op._op.view(1 << 20)
    op.close()
    comm.destroy()


def memory_of(op, routing):
    """Where a recorded routing's memory is: the op's same routing whatever
    Routing object lends it."""
    return op.route_map(routing).__array_interface__["data"][0]


def test_a_dropped_returned_routing_is_recorded_into_again():
    """dispatch(return_routing=True) without record= hands out a routing; once the
    caller drops it the next such call records into it again (no device free, which
    on a GPU waits for every stream), while one still held is never taken. Each
    routing replays its own call's routing."""
    comm, op = single_rank_op()

    def round_trip(x, w, idx, routing=None):
        if routing is None:
            return identity_round_trip(op, x, w, idx, return_routing=True)[-1]
        identity_round_trip(op, x, w, idx, routing=routing)
        return routing

    with op:
        x1, w1, idx1 = make_inputs(0, 1, 7, "bf16", seed=21)
        first = round_trip(x1, w1, idx1)
        first_at = memory_of(op, first)
        del first  # the op keeps its memory
        x2, w2, idx2 = make_inputs(0, 1, 8, "bf16", seed=22)
        second = round_trip(x2, w2, idx2)
        assert memory_of(op, second) == first_at and second.tokens == 8
        x3, w3, idx3 = make_inputs(0, 1, 4, "bf16", seed=23)
        third = round_trip(x3, w3, idx3)  # `second` is held: a new one
        assert memory_of(op, third) != first_at and third.tokens == 4
        # Replays with new payloads, each of its own recorded routing.
        x2b = (x2.astype(np.float32) * 0.5).astype(ml_dtypes.bfloat16)
        round_trip(x2b, w2, idx2, routing=second)
        round_trip(x3, w3, idx3, routing=third)
        # One routing per layer, all held until the step ends, then dropped: the
        # next step takes the same ones again, never one still held.
        del second, third
        layers = [make_inputs(0, 1, 3 + layer, "bf16", seed=30 + layer) for layer in range(5)]
        made = set()
        for step in range(3):
            held = [round_trip(*layer) for layer in layers]
            assert len({memory_of(op, routing) for routing in held}) == len(layers)
            assert [routing.tokens for routing in held] == [3 + layer for layer in range(5)]
            made |= {memory_of(op, routing) for routing in held}
            del held
        assert len(made) == len(layers)
    comm.destroy()


class _CaptureSwitch:
    """The op's native half with capturing() answered by the test: the host device
    cannot capture a graph, and this is what a GPU stream answers while
    torch.cuda.graph captures (test_gpu.py checks the same under torch)."""

    def __init__(self, native):
        self._native = native
        self.now = False

    def capturing(self):
        return self.now

    def __getattr__(self, name):
        return getattr(self._native, name)


def test_a_routing_a_graph_captured_is_never_handed_to_another_call():
    """A routing a captured dispatch recorded into (return_routing=True) or replayed
    (routing=) is the graph's for as long as it lives: dropped, it is never recorded
    into by a later call, captured or not; eager routings are still reused."""
    comm, op = single_rank_op()
    switch = _CaptureSwitch(op._op)
    op._op = switch
    x, w, idx = make_inputs(0, 1, 7, "bf16", seed=41)

    def call(**kw):
        result = op.dispatch(x, w, None, idx, **kw)
        op.combine(op.combine_input(), result[1])
        return result[-1] if kw.get("return_routing") else None

    with op:
        replayed = call(return_routing=True)
        graphs = {memory_of(op, replayed)}
        switch.now = True
        call(routing=replayed)
        del replayed
        for _ in range(2):  # two captures, each dropping its routing after
            captured = call(return_routing=True)
            assert memory_of(op, captured) not in graphs
            graphs.add(memory_of(op, captured))
            del captured
        switch.now = False
        eager = call(return_routing=True)
        assert memory_of(op, eager) not in graphs
        eager_at = memory_of(op, eager)
        del eager
        assert memory_of(op, call(return_routing=True)) == eager_at  # an eager one nobody holds is recorded into again
        op.synchronize()
    comm.destroy()


@pytest.mark.parametrize("indices_start", ["on_a_line", "mid_line"])
@pytest.mark.parametrize("tokens", [7, 1031], ids=["origins_by_the_kernel", "origins_by_a_copy"])
def test_a_kept_call_outlives_later_dispatches_and_the_callers_buffers(indices_start, tokens):
    """dispatch(return_routing=True, keep_call=True): recorded_call(routing) answers
    with that call's received count, origins and indices after another dispatch has
    overwritten the op's own and the caller has reused its indices' buffer. The
    kernel keeps indices that start on a 16-byte line; a view that starts mid-line
    (rows of 3 indices from the second on) is kept by a copy instead. The dispatch
    kernel's last block keeps the origins of the rows received in a call of up to
    1024 tokens; a larger call's are a copy of the whole capacity after it."""
    comm, op = single_rank_op(max_tokens=tokens + 2)
    with op:
        x, w, idx = make_inputs(0, 1, tokens, "bf16", seed=31)
        buffer = np.full((idx.shape[0] + 1, idx.shape[1]), 5, dtype=np.int32)
        caller_idx = buffer[:-1] if indices_start == "on_a_line" else buffer[1:]
        caller_idx[:] = idx
        assert (caller_idx.ctypes.data % 16 == 0) == (indices_start == "on_a_line")
        _, w_out, _, _, total, kept = op.dispatch(x, w, None, caller_idx, return_routing=True, keep_call=True)
        op.synchronize()
        want_total, want_origins = int(total[0]), np.array(op.received_origins(), copy=True)
        op.combine(op.combine_input(), w_out)
        x2, w2, idx2 = make_inputs(0, 1, 3, "bf16", seed=32)
        _, w_out2, _, _, total2, other = op.dispatch(x2, w2, None, idx2, return_routing=True)
        caller_idx[:] = -1
        op.synchronize()
        assert int(total2[0]) != want_total
        got_total, got_origins, got_indices = (np.array(a, copy=True) for a in op.recorded_call(kept))
        assert int(got_total[0]) == want_total
        np.testing.assert_array_equal(got_origins[:want_total], want_origins[:want_total])
        if tokens <= 1024:  # the rows that arrived; the fresh routing's rows past them read "no row"
            assert (got_origins[want_total:] == -1).all()
        np.testing.assert_array_equal(got_indices, idx)
        op.combine(op.combine_input(), w_out2)
        with pytest.raises(epjit.Error, match="kept no call"):
            op.recorded_call(other)  # recorded without keep_call
        with pytest.raises(epjit.Error, match="without return_routing"):
            op.dispatch(x, w, None, idx, keep_call=True)
    comm.destroy()


def test_an_op_left_to_the_collector_after_its_communicator_is_destroyed():
    """MORI's examples drop the op after the communicator's `with` block: the
    communicator's destroy() frees the memory of the ops built on it, so the
    collector (or the interpreter's exit) has nothing left to free."""
    import subprocess
    import sys
    import textwrap
    program = textwrap.dedent(f"""
        import gc, sys
        sys.path[:0] = {sys.path!r}
        import numpy as np, ml_dtypes, epjit
        comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target="host")
        config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim={HIDDEN},
            max_num_inp_token_per_rank={MAX_TOKENS}, num_experts_per_rank={EPR}, num_experts_per_token={TOPK})
        op = epjit.EpDispatchCombineOp(config, comm)
        x = np.ones((3, {HIDDEN}), dtype=ml_dtypes.bfloat16)
        tokens = op.dispatch(x, np.ones((3, {TOPK}), np.float32), None, np.zeros((3, {TOPK}), np.int32))[0]
        comm.destroy()
        try:
            op.dispatch(x, np.ones((3, {TOPK}), np.float32), None, np.zeros((3, {TOPK}), np.int32))
            print("dispatch after destroy did not raise")
        except epjit.Error as error:
            assert "closed" in str(error), error
        keep = op  # left for the interpreter's exit
        del tokens
        gc.collect()
        print("survived")
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "survived", (done.returncode, done.stdout, done.stderr)


def test_inputs_dropped_right_after_a_call_are_held_until_the_stream_has_read_them():
    comm, op = single_rank_op()
    for trial in range(12):
        x, w, idx = make_inputs(0, 1, 8, "bf16", seed=100 + trial)
        # Temporaries: freed as the call returns unless the op holds them, and
        # the freed memory is reused at once by the garbage below.
        tokens, w_out, _, _, total = op.dispatch(x.copy(), w.copy(), None, idx.copy())
        garbage = [np.full(x.shape, 0x7F7F, dtype=np.uint16) for _ in range(16)]
        op.synchronize()
        received = int(total[0])
        expert = op.combine_input()
        expert[:received] = tokens[:received]
        out, _ = op.combine(expert.copy(), w_out.copy())
        garbage += [np.full(x.shape, 0x7F7F, dtype=np.uint16) for _ in range(16)]
        op.check()
        want = identity_expected(x, idx, "none", None)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), want.view(np.uint8))
    op.close()
    comm.destroy()


def test_unsigned_arrays_are_not_read_as_float_or_signed_bits():
    comm, op = single_rank_op()
    x, w, idx = make_inputs(0, 1, 3, "bf16")
    with pytest.raises(epjit.Error, match="weights has a DLPack dtype"):
        op.dispatch(x, w.view(np.uint32), None, idx)
    with pytest.raises(epjit.Error, match="indices has a DLPack dtype"):
        op.dispatch(x, w, None, idx.view(np.uint32))
    op.close()
    comm.destroy()


def test_the_peer_timeout_is_a_config_field_with_a_range():
    comm, op = single_rank_op(peer_timeout_s=2.5)
    op.close()
    with pytest.raises(epjit.Error, match=r"peer_timeout_s.*\[0.001, 86400\]"):
        single_rank_op(peer_timeout_s=-1)
    comm.destroy()


def test_a_world_beyond_the_targets_wave_size_is_refused_by_the_template():
    # The bound is the template's (ep.param @world at_most "wave_size"): the
    # config is valid on its own, and building its kernels names the bound.
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=33, hidden_dim=HIDDEN, max_num_inp_token_per_rank=4,
                                           num_experts_per_rank=EPR, num_experts_per_token=TOPK,
                                           target="host-gfx1250")
    config.validate()
    with pytest.raises(epjit.Error, match=r"parameter 'world' = 33 exceeds its bound at_most = \"wave_size\": "
                                          r"the wave size of host-gfx1250 is 32"):
        epjit.cache.warm_op(config)
    # At the bound, the same shape builds.
    fits = epjit.EpDispatchCombineConfig(rank=0, world_size=32, hidden_dim=HIDDEN, max_num_inp_token_per_rank=4,
                                         num_experts_per_rank=EPR, num_experts_per_token=TOPK, target="host-gfx1250")
    assert epjit.cache.warm_op(fits)


def test_the_combine_protocol_is_a_config_field():
    fields = dict(rank=0, world_size=2, hidden_dim=HIDDEN, num_experts_per_rank=EPR, num_experts_per_token=TOPK)
    small = epjit.EpDispatchCombineConfig(max_num_inp_token_per_rank=8, **fields)
    assert small.low_latency_combine is None and small.uses_low_latency_combine  # auto: a small plain op
    assert not epjit.EpDispatchCombineConfig(max_num_inp_token_per_rank=4096, **fields).uses_low_latency_combine
    alone = dict(fields, world_size=1)  # no peers: gather reads its rows in place
    assert not epjit.EpDispatchCombineConfig(max_num_inp_token_per_rank=8, **alone).uses_low_latency_combine
    staged = epjit.EpDispatchCombineConfig(max_num_inp_token_per_rank=8, low_latency_combine=False, **fields)
    assert not staged.uses_low_latency_combine
    quantized = epjit.EpDispatchCombineConfig(max_num_inp_token_per_rank=8, low_latency_combine=True,
                                              combine_mode="scatter", quant_type="fp8_blockwise", target="host",
                                              **fields)
    with pytest.raises(epjit.Error, match="low_latency_combine.*cannot run this op.*quant_type fp8_blockwise"):
        quantized.validate()


@pytest.mark.parametrize("target,fp8", [("host-gfx950", ml_dtypes.float8_e4m3fn),
                                        ("host-gfx942", ml_dtypes.float8_e4m3fnuz)])
def test_fp8_goes_in_and_comes_out_as_the_targets_ml_dtypes_type(target, fp8):
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target=target)
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=HIDDEN, max_num_inp_token_per_rank=8,
                                           num_experts_per_rank=EPR, num_experts_per_token=TOPK, data_type="fp8")
    op = epjit.EpDispatchCombineOp(config, comm)
    x32, w, idx = make_inputs(0, 1, 7, "f32", seed=5)
    x = x32.astype(fp8)
    other = ml_dtypes.float8_e4m3fnuz if fp8 is ml_dtypes.float8_e4m3fn else ml_dtypes.float8_e4m3fn
    with pytest.raises(epjit.Error, match=f"expected ml_dtypes.float8_{np.dtype(fp8).name[7:]}"):
        op.dispatch(x32.astype(other), w, None, idx)
    tokens, _, _, _, total = op.dispatch(x, w, None, idx)
    op.synchronize()
    assert tokens.dtype == np.dtype(fp8)
    received = int(total[0])
    assert received == 7
    # One rank: every token arrives once, in slot order; compare as sets of rows.
    got = sorted(bytes(row) for row in tokens[:received].view(np.uint8))
    assert got == sorted(bytes(row) for row in x.view(np.uint8))
    op.combine(np.zeros((op.capacity, HIDDEN), dtype=ml_dtypes.bfloat16))
    op.close()
    comm.destroy()


def test_the_route_map_is_laid_out_as_the_record_says():
    """buffer_parts("route") is the kernels' interface record's layout of a route
    map: route_map() spans it, and the received count stands at route_received
    (what a layer above reads instead of knowing the layout)."""
    comm, op = single_rank_op(max_tokens=7)
    with op:
        parts = op.buffer_parts("route")
        assert list(parts) == ["route_entries", "route_received", "route_sent", "route_source_first", "route_forward"]
        assert parts["route_source_first"][1] == 0  # source order across nodes only
        assert parts["route_entries"][:2] == (0, 7 * TOPK)
        assert parts["route_received"][:2] == (7 * TOPK, 1) and "received" in parts["route_received"][2]
        assert parts["route_forward"] == (7 * TOPK + 2, 0, parts["route_forward"][2])  # intranode: no forward route
        x, w, idx = make_inputs(0, 1, 5, "bf16", seed=31)
        routing = identity_round_trip(op, x, w, idx, return_routing=True)[-1]
        route = np.array(op.route_map(routing), copy=True)
        assert route.shape == (parts["route_forward"][0],)
        received = int(route[parts["route_received"][0]])
        assert received == len({0} & set((idx[idx >= 0] // EPR).tolist())) * 5  # world 1: every token here once
        assert (route[: 5 * TOPK].reshape(5, TOPK)[:, 1:] == -1).all()  # one destination rank per token
        with pytest.raises(epjit.Error, match="one of its buffers: route, kept, outputs, std_moe"):
            op.buffer_parts("window")
    comm.destroy()


def test_numpy_outputs_are_final_when_a_call_returns():
    # A numpy caller has no stream to order by: what a call returns is final
    # at once, call after call (different counts, so a stale read shows).
    comm, op = single_rank_op(max_tokens=8)
    rng = np.random.default_rng(5)
    for tokens in (8, 3, 0, 7):
        x = rng.standard_normal((tokens, HIDDEN)).astype(ml_dtypes.bfloat16)
        w = rng.random((tokens, TOPK), dtype=np.float32)
        idx = np.array([rng.permutation(EPR)[:TOPK] for _ in range(tokens)], dtype=np.int32).reshape(tokens, TOPK)
        out, out_w, _, out_idx, total = op.dispatch(x, w, None, idx)
        assert np.array(total).tolist() == [tokens]
        received = np.asarray(out)[:tokens].astype(np.float32)
        assert sorted(map(bytes, received)) == sorted(map(bytes, x.astype(np.float32)))
        counts = op.local_expert_counts(on_device=True)
        assert int(np.asarray(counts).sum()) == tokens * TOPK
        combined, combined_w = op.combine(out, out_w)
        # One rank: each token has one destination, so combine returns the row
        # it received (the expert output passed back) and its weights.
        assert np.array_equal(np.asarray(combined)[:tokens].view(np.uint16), x.view(np.uint16))
        assert np.array_equal(np.asarray(combined_w)[:tokens], w)
    op.close()
    comm.destroy()


LEAK_SCRIPT = """
import ctypes, sys
import numpy as np, epjit
comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target="host")
config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=64, max_num_inp_token_per_rank=4,
                                       num_experts_per_rank=4, num_experts_per_token=2)
op = epjit.EpDispatchCombineOp(config, comm)
# As a torch.compile'd function's guards do: a reference nobody drops, to an op never closed.
ctypes.pythonapi.Py_IncRef(ctypes.py_object(op._op))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(op._op.dispatch))
print("exiting")
"""


@pytest.mark.parametrize("setting, warned", [(None, False), ("0", False), ("1", True)])
def test_objects_abandoned_at_exit_are_not_reported_as_leaks_unless_asked(setting, warned):
    env = dict(os.environ)
    env.pop("EPJIT_PYTHON_LEAK_WARNINGS", None)
    if setting is not None:
        env["EPJIT_PYTHON_LEAK_WARNINGS"] = setting
    done = subprocess.run([sys.executable, "-c", LEAK_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "exiting" in done.stdout
    assert ("nanobind: leaked" in done.stderr) == warned, done.stderr


def test_a_bad_leak_warning_setting_fails_the_import():
    env = dict(os.environ, EPJIT_PYTHON_LEAK_WARNINGS="yes")
    done = subprocess.run([sys.executable, "-c", "import epjit"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "EPJIT_PYTHON_LEAK_WARNINGS = 'yes'" in done.stderr and "set it to 0 or 1" in done.stderr


def test_events_order_the_ops_stream_with_other_work():
    # Two ops of one rank, each on its own stream: the second waits for an
    # event the first recorded after its call, then runs its own; each
    # answers as alone. An event is complete once its stream passed it.
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), target="host")
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=HIDDEN, max_num_inp_token_per_rank=8,
                                           num_experts_per_rank=EPR, num_experts_per_token=TOPK)
    first, second = epjit.EpDispatchCombineOp(config, comm), epjit.EpDispatchCombineOp(config, comm)
    assert first.comm_stream == 0 and second.comm_stream == 0  # host streams have no native handle
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, HIDDEN)).astype(ml_dtypes.bfloat16)
    w = rng.random((5, TOPK), dtype=np.float32)
    idx = np.array([rng.permutation(EPR)[:TOPK] for _ in range(5)], dtype=np.int32)
    first.dispatch(x, w, None, idx)
    done = first.record_event()
    assert isinstance(done, epjit._epjit.Event)
    second.wait_event(done)
    out = second.dispatch(x, w, None, idx, stream=second.comm_stream)  # a stream: asynchronous
    finished = second.record_event()
    finished.synchronize()
    assert finished.completed and done.completed
    assert np.array(out[4]).tolist() == [5]
    with pytest.raises(TypeError, match="expected an epjit.Event"):
        second.wait_event(object())
    first.close()
    second.close()
    with pytest.raises(epjit.Error, match="record on a closed EpDispatchCombineOp"):
        first.record_event()
    comm.destroy()


def test_a_token_count_on_the_device_moves_only_its_rows():
    # max rows passed, the count's first moved: padding (valid experts) is
    # neither received nor summed, and combine leaves its rows as they were.
    comm, op = single_rank_op(max_tokens=8)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((8, HIDDEN)).astype(ml_dtypes.bfloat16)
    w = rng.random((8, TOPK), dtype=np.float32)
    idx = np.array([rng.permutation(EPR)[:TOPK] for _ in range(8)], dtype=np.int32)
    for count in (5, 0, 8, 1):
        out, out_w, _, _, total = op.dispatch(x, w, None, idx, token_count=np.array([count], dtype=np.int32))
        assert np.array(total).tolist() == [count]
        received = np.asarray(out)[:count].astype(np.float32)
        assert sorted(map(bytes, received)) == sorted(map(bytes, x[:count].astype(np.float32)))
        expert = np.full(np.asarray(out).shape, 7, dtype=ml_dtypes.bfloat16)
        expert[:count] = np.asarray(out)[:count]
        combined, _ = op.combine(expert, out_w)
        assert combined.shape == (8, HIDDEN)
        assert np.array_equal(np.asarray(combined)[:count].view(np.uint16), x[:count].view(np.uint16))
    with pytest.raises(epjit.Error, match="one int32"):
        op.dispatch(x, w, None, idx, token_count=np.array([1, 2], dtype=np.int32))
    op.close()
    comm.destroy()


@pytest.mark.parametrize("world,gpu_per_node", [(1, None), (3, None), (6, 2), (4, 1)])
def test_the_dispatch_layout_counts_what_a_dispatch_would_send(world, gpu_per_node):
    # DeepEP's get_dispatch_layout on the op's kernel, against a count in numpy:
    # odd token counts, -1 and other negative ids, a repeated expert (counted
    # per entry, its rank once), an id past the last expert (counted nowhere);
    # across nodes the tokens per node too (a token once per node). Every
    # output poisoned first.
    def rank(r, comm):
        config = epjit.EpDispatchCombineConfig(rank=r, world_size=world, hidden_dim=HIDDEN,
                                               max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR,
                                               num_experts_per_token=TOPK, gpu_per_node=gpu_per_node)
        nodes = world // gpu_per_node if gpu_per_node else None
        experts = world * EPR
        with epjit.EpDispatchCombineOp(config, comm) as op:
            rng = np.random.default_rng(41 + r)
            for tokens in (0, 1, 7, 23):
                idx = rng.integers(-3, experts, (tokens, TOPK)).astype(np.int64)
                if tokens > 2:
                    idx[1] = [idx[1, 0]] * TOPK
                    idx[2, 0] = experts + 5
                per_rank = np.full(world, -7, dtype=np.int32)
                per_expert = np.full(experts, -7, dtype=np.int32)
                in_rank = np.full((tokens, world), 9, dtype=np.uint8)
                per_node = np.full(nodes, -7, dtype=np.int32) if nodes else None
                op.dispatch_layout(idx, per_rank, per_expert, in_rank, per_node=per_node)
                valid = (idx >= 0) & (idx < experts)
                want_expert = np.array([int((idx[valid] == e).sum()) for e in range(experts)], dtype=np.int32)
                want_in = np.zeros((tokens, world), dtype=np.uint8)
                for t in range(tokens):
                    for e in idx[t][valid[t]]:
                        want_in[t, e // EPR] = 1
                np.testing.assert_array_equal(per_expert, want_expert)
                np.testing.assert_array_equal(in_rank, want_in)
                np.testing.assert_array_equal(per_rank, want_in.sum(0).astype(np.int32))
                if nodes:
                    want_node = want_in.reshape(tokens, nodes, gpu_per_node).any(2).sum(0).astype(np.int32)
                    np.testing.assert_array_equal(per_node, want_node)
            if not nodes:
                with pytest.raises(epjit.Error, match="per_node counts for an op on one node"):
                    op.dispatch_layout(idx, per_rank, per_expert, in_rank, per_node=np.zeros(1, dtype=np.int32))
            with pytest.raises(epjit.Error, match="indices"):
                op.dispatch_layout(np.zeros((2, TOPK), dtype=np.int32), per_rank, per_expert,
                                   np.zeros((2, world), dtype=np.uint8))
            with pytest.raises(epjit.Error, match="in_rank"):
                op.dispatch_layout(np.zeros((2, TOPK), dtype=np.int64), per_rank, per_expert,
                                   np.zeros((2, world + 1), dtype=np.uint8))

    on_rank_threads(world, rank, gpu_per_node=gpu_per_node)


def test_int64_ids_dispatch_and_combine_as_int32_ones_do():
    # Frameworks' int64 top-k go to the op as they are (ep_narrow_indices on
    # the op's stream): the same received rows, weights, ids and combined sums
    # as the int32 copy; a view starting mid-line is taken; an id past int32
    # is refused naming its value, never wrapped to its low word. Source order,
    # so the calls' rows arrive in the same places.
    world = 2

    def rank(r, comm):
        config = epjit.EpDispatchCombineConfig(rank=r, world_size=world, hidden_dim=HIDDEN,
                                               max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR,
                                               num_experts_per_token=TOPK, receive_order="source")
        with epjit.EpDispatchCombineOp(config, comm) as op:
            x, w, idx = make_inputs(r, world, 13, "bf16", seed=5, masked=True)
            got = []
            for ids in (idx, idx.astype(np.int64), np.concatenate([np.zeros((1, TOPK), np.int64),
                                                                   idx.astype(np.int64)])[1:]):
                tokens, weights, _, indices, total = op.dispatch(x, w, None, ids)
                op.synchronize()
                n = int(total[0])
                got.append((n, np.array(tokens[:n]).view(np.uint16), np.array(weights[:n]),
                            np.array(indices[:n])))
                out, _ = op.combine(tokens, weights)
                got[-1] += (np.array(out).view(np.uint16),)
            for other in got[1:]:
                assert other[0] == got[0][0]
                for a, b in zip(other[1:], got[0][1:]):
                    np.testing.assert_array_equal(a, b)
            # Fewer rows than capacity only once received_counts() read the count.
            tokens, weights, _, _, _ = op.dispatch(x, w, None, idx.astype(np.int64))
            with pytest.raises(epjit.Error, match="input"):
                op.combine(tokens[:got[0][0]], weights[:got[0][0]])
            assert op.received_counts()[0] == got[0][0]
            out, _ = op.combine(np.array(tokens[:got[0][0]]), np.array(weights[:got[0][0]]))
            np.testing.assert_array_equal(np.array(out).view(np.uint16), got[0][4])
            wrapped = idx.astype(np.int64)
            wrapped[2, 1] = (1 << 32) + 1  # its low word is expert 1
            with pytest.raises(epjit.Error, match=r"indices\[2, 1\] = 4294967297"):
                op.dispatch(x, w, None, wrapped)

    on_rank_threads(world, rank)
