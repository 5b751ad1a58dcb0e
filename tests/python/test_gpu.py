"""The Python op with torch CUDA tensors, one process per GPU (world = the GPUs
present, at most 2; EPJIT_GPU_TEST_RANKS_PER_GPU=2 puts two on one GPU,
gpu_ranks.py): the identity-expert check for gather and scatter on
torch's current stream, dispatch->combine captured in one torch.cuda.CUDAGraph
and replayed with fresh inputs, and communicators made from torch.distributed
groups (gloo and nccl) with the expert counts on the device. Skipped without
torch or a GPU.
The ops run on the GPU's own target (sm90, sm100 on NVIDIA; gfx942, ... under a
ROCm build of torch). `python test_gpu.py --warm DIR` builds the kernels these
tests use for EPJIT_GPU_WARM_TARGETS (default sm90) into DIR (on a machine
without a GPU; NVRTC and clang need none).
"""
import os
import sys

import pytest

import epjit
from gpu_ranks import cuda_ranks, gpu_device, gpu_of, warm_targets

HIDDEN, TOPK, EPR, MAX_TOKENS = 1024, 4, 8, 64


def make_config(world, rank, mode, data_type="bf16", target=None):
    """target None: the communicator's GPU's own."""
    fields = dict(target=target) if target else {}
    return epjit.EpDispatchCombineConfig(rank=rank, world_size=world, hidden_dim=HIDDEN,
                                         max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR,
                                         num_experts_per_token=TOPK, data_type=data_type, combine_mode=mode, **fields)


def inputs(torch, world, rank, tokens, seed):
    g = torch.Generator(device="cpu").manual_seed(seed * 131 + rank)
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    weights = torch.rand(tokens, TOPK, generator=g)
    indices = torch.stack([torch.randperm(world * EPR, generator=g)[:TOPK] for _ in range(tokens)]).to(torch.int32)
    return x.cuda(), weights.cuda(), indices.reshape(tokens, TOPK).cuda()


def identity_expected(torch, x, indices):
    """U copies of x summed in f32 (exact for U <= 8 and bf16 x), rounded to bf16."""
    ranks = (indices // EPR).long()
    distinct = torch.tensor([len(set(row.tolist())) for row in ranks], device=x.device, dtype=torch.float32)
    return (x.float() * distinct[:, None]).to(torch.bfloat16)


def eager_round_trip_before_capture(torch, op, x, w, idx, **dispatch_options):
    """One dispatch and combine on a side stream, then a device sync: torch advises
    an eager run before a capture, off the capture's stream. Returns dispatch's result."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        result = op.dispatch(x, w, None, idx, **dispatch_options)
        op.combine(result[0], result[1])
    torch.cuda.synchronize()
    return result


def rank_main(world, rank, uid, failures):
    import torch
    try:
        torch.cuda.set_device(gpu_of(rank))
        comm = epjit.Communicator.init(world, rank, uid, device=gpu_device(), device_ordinal=gpu_of(rank))
        for mode in ("gather", "scatter"):
            with epjit.EpDispatchCombineOp(make_config(world, rank, mode), comm) as op:
                for call, tokens in enumerate([MAX_TOKENS, 1, 37 - rank]):
                    x, w, idx = inputs(torch, world, rank, tokens, call)
                    recv, recv_w, _, _, total = op.dispatch(x, w, None, idx)
                    n = int(total.item())  # .item() synchronizes torch's stream, where the op ran
                    expert = op.combine_input() if mode == "gather" else torch.empty_like(recv)
                    expert[:n] = recv[:n]
                    out, out_w = op.combine(expert, recv_w)
                    torch.cuda.synchronize()
                    want = identity_expected(torch, x, idx)
                    if not torch.equal(out.view(torch.int16), want.view(torch.int16)):
                        raise AssertionError(f"{mode} call {call}: combine(dispatch(x)) != U * x")
                    comm.barrier()
        # fp8 in and out as the target's e4m3 (torch.float8_e4m3fn; e4m3fnuz on gfx942):
        # the received rows are the sent ones (compared as bytes, per origin).
        with epjit.EpDispatchCombineOp(make_config(world, rank, "gather", "fp8"), comm) as op:
            fp8 = getattr(torch, "float8_" + next(t["fp8"] for t in epjit.targets() if t["name"] == op.target))
            x, w, idx = inputs(torch, world, rank, 16, 300)
            x8 = x.to(fp8)
            recv, _, _, _, total = op.dispatch(x8, w, None, idx)
            n = int(total.item())
            if recv.dtype != fp8:
                raise AssertionError(f"fp8 dispatch returned {recv.dtype}, not {fp8}")
            sent = {bytes(row.cpu().view(torch.uint8).numpy()) for row in x8}
            if world == 1 and {bytes(row.cpu().view(torch.uint8).numpy()) for row in recv[:n]} != sent:
                raise AssertionError("fp8 rows changed on the way")
            op.combine(op.combine_input())
            torch.cuda.synchronize()
            comm.barrier()
        # One CUDA graph: dispatch, then combine of the dispatched rows (identity experts).
        with epjit.EpDispatchCombineOp(make_config(world, rank, "gather"), comm) as op:
            x, w, idx = inputs(torch, world, rank, MAX_TOKENS, 100)
            eager_round_trip_before_capture(torch, op, x, w, idx)
            comm.barrier()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                recv, recv_w, _, _, _ = op.dispatch(x, w, None, idx)
                out, _ = op.combine(recv, recv_w)
            for replay in range(20):
                fresh_x, fresh_w, fresh_idx = inputs(torch, world, rank, MAX_TOKENS, 200 + replay)
                x.copy_(fresh_x)
                w.copy_(fresh_w)
                idx.copy_(fresh_idx)
                torch.cuda.synchronize()
                comm.barrier()
                graph.replay()
                torch.cuda.synchronize()
                if not torch.equal(out.view(torch.int16), identity_expected(torch, x, idx).view(torch.int16)):
                    raise AssertionError(f"graph replay {replay}: combine(dispatch(x)) != U * x")
                comm.barrier()
            del graph
        comm.destroy()
    except Exception as error:  # reported by the test
        failures.put(f"rank {rank}: {type(error).__name__}: {error}")
        return
    failures.put("")


def run_ranks(world, main, args_of):
    """Runs main(*args_of(rank), failures) in a spawned process per rank; each
    puts "" or what went wrong on the queue."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    failures = context.Queue()
    ranks = [context.Process(target=main, args=(*args_of(r), failures)) for r in range(world)]
    for p in ranks:
        p.start()
    results = [failures.get(timeout=600) for _ in ranks]
    for p in ranks:
        p.join(timeout=60)
    assert [r for r in results if r] == []


def test_torch_cuda_identity_and_graph():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    world = cuda_ranks(torch.cuda.device_count(), 2)
    uid = epjit.Communicator.get_unique_id()
    run_ranks(world, rank_main, lambda rank: (world, rank, uid))


def group_rank_main(backend, world, rank, port, failures):
    """One rank of a torch.distributed group: the epjit communicator comes from
    the group, then one identity-expert round trip on the GPU."""
    import torch
    import torch.distributed as dist
    try:
        torch.cuda.set_device(gpu_of(rank))
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        comm = epjit.Communicator.from_process_group(device=gpu_device(), device_ordinal=gpu_of(rank))
        if (comm.rank, comm.world_size) != (rank, world):
            raise AssertionError(f"from_process_group gave rank {comm.rank} of {comm.world_size}")
        with epjit.EpDispatchCombineOp(make_config(world, rank, "gather"), comm) as op:
            x, w, idx = inputs(torch, world, rank, 37 - rank, 400)
            recv, recv_w, _, _, total = op.dispatch(x, w, None, idx)
            counts = op.local_expert_counts(on_device=True)  # on torch's stream, no synchronization
            n = int(total.item())
            if not counts.is_cuda or counts.dtype != torch.int32 or counts.tolist() != op.local_expert_counts():
                raise AssertionError(f"device expert counts {counts} != {op.local_expert_counts()}")
            expert = op.combine_input()
            expert[:n] = recv[:n]
            out, _ = op.combine(expert, recv_w)
            torch.cuda.synchronize()
            if not torch.equal(out.view(torch.int16), identity_expected(torch, x, idx).view(torch.int16)):
                raise AssertionError(f"{backend} group: combine(dispatch(x)) != U * x")
            comm.barrier()
        comm.destroy()
        dist.destroy_process_group()
    except Exception as error:  # reported by the test
        failures.put(f"rank {rank} ({backend}): {type(error).__name__}: {error}")
        return
    failures.put("")


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_communicator_from_process_group(backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import socket
    world = cuda_ranks(torch.cuda.device_count(), 2)
    if backend == "nccl" and world > torch.cuda.device_count():
        pytest.skip(f"NCCL takes one rank per GPU ({world} ranks, {torch.cuda.device_count()} GPUs)")
    with socket.socket() as probe:  # a free port for the group's TCP store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run_ranks(world, group_rank_main, lambda rank: (backend, world, rank, port))


def torch_and_one_rank():
    """torch and a one-rank communicator on GPU 0 (its own target); skips without torch or a GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    torch.cuda.set_device(0)
    return torch, epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), device=gpu_device(),
                                          device_ordinal=0)


def test_torch_arguments_are_checked_as_dlpack_ones():
    """Plain torch tensors are read from their attributes, the rest through DLPack:
    either way a bad argument (misaligned ones included) is refused by name, and
    a Parameter that requires grad is read as it is."""
    torch, comm = torch_and_one_rank()
    with epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm) as op:
        x, w, idx = inputs(torch, 1, 0, 5, 7)
        with pytest.raises(epjit.Error, match="input is not contiguous"):
            op.dispatch(torch.zeros(HIDDEN, 5, dtype=torch.bfloat16, device="cuda").t(), w, None, idx)
        with pytest.raises(epjit.Error, match="input lives on DLPack device type 1"):
            op.dispatch(x.cpu(), w, None, idx)
        with pytest.raises(epjit.Error, match=r"input has a DLPack dtype \(code 2, 16 bits\)"):
            op.dispatch(x.half(), w, None, idx)
        with pytest.raises(epjit.Error, match=r"indices has a DLPack dtype \(code 0, 16 bits\)"):
            op.dispatch(x, w, None, idx.to(torch.int16))  # int32 and int64 are the ids' types
        with pytest.raises(epjit.Error, match="weights is a list, not an array"):
            op.dispatch(x, w.tolist(), None, idx)
        # Contiguous views one element past a 16-byte line: the kernels' vector
        # loads would fault the GPU (and end the context); they are refused
        # before the launch, and the calls below run on.
        off_line = torch.zeros(5 * HIDDEN + 1, dtype=torch.bfloat16, device="cuda")[1:].view(5, HIDDEN)
        with pytest.raises(epjit.Error, match=r"dispatch: input is at 0x[0-9a-f]+, which is not a multiple of 16"):
            op.dispatch(off_line, w, None, idx)
        off_line_idx = torch.zeros(5 * TOPK + 1, dtype=torch.int32, device="cuda")[1:].view(5, TOPK)
        with pytest.raises(epjit.Error, match=r"dispatch: indices is at .*\(4 past one\)"):
            op.dispatch(x, w, None, off_line_idx)
        weights = torch.nn.Parameter(w.clone())
        for call in range(2):  # the second call hands out the same result tensors
            recv, recv_w, _, _, total = op.dispatch(x, weights, None, idx)
            n = int(total.item())
            expert = op.combine_input()
            expert[:n] = recv[:n]
            out, _ = op.combine(expert, recv_w)
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), identity_expected(torch, x, idx).view(torch.int16))
            if call:
                assert recv is first_recv and out is first_out
            first_recv, first_out = recv, out
    comm.destroy()


def test_a_kept_call_on_the_gpu():
    """dispatch(return_routing=True, keep_call=True) on CUDA: the dispatch kernel's
    last block keeps the call's origins (ep.block_any on sm90) and the indices, so
    recorded_call() answers with the call's count, origins and indices after a later
    dispatch and after the caller has overwritten its indices; on a fresh routing the
    rows past the count read -1 (make_routing() fills them on the device)."""
    torch, comm = torch_and_one_rank()
    with epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm) as op:
        for tokens, seed in ((5, 41), (MAX_TOKENS - 3, 42)):
            x, w, idx = inputs(torch, 1, 0, tokens, seed)
            caller_idx = idx.clone()
            _, w_out, _, _, total, kept = op.dispatch(x, w, None, caller_idx, return_routing=True, keep_call=True)
            want_total = int(total.item())
            want_origins = op.received_origins()[:want_total].clone()
            op.combine(op.combine_input(), w_out)
            x2, w2, idx2 = inputs(torch, 1, 0, 2, seed + 100)
            _, w_out2, _, _, total2, _ = op.dispatch(x2, w2, None, idx2, return_routing=True)
            caller_idx.fill_(-7)
            op.combine(op.combine_input(), w_out2)
            torch.cuda.synchronize()
            assert int(total2.item()) != want_total
            got_total, got_origins, got_indices = op.recorded_call(kept)
            assert int(got_total.item()) == want_total == tokens  # one rank: each token arrives once
            assert torch.equal(got_origins[:want_total], want_origins)
            assert bool((got_origins[want_total:] == -1).all()), "rows past the kept count must read -1"
            assert torch.equal(got_indices, idx)
    comm.destroy()


def test_a_dispatch_that_returns_a_routing_captured_by_torch():
    """dispatch(return_routing=True, keep_call=True) captured by torch.cuda.graph
    (global capture mode) on a stream no routing was used on: the routing is made
    inside the capture (its allocation and fills stay out of the graph), and each
    replay records its own call into it; check() and close() in the capture are
    refused without ending it."""
    torch, comm = torch_and_one_rank()
    with epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm) as op:
        tokens = MAX_TOKENS - 5
        x, w, idx = inputs(torch, 1, 0, tokens, 51)
        eager_round_trip_before_capture(torch, op, x, w, idx)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            recv, recv_w, _, _, total, routing = op.dispatch(x, w, None, idx, return_routing=True, keep_call=True)
            with pytest.raises(epjit.Error, match="check while the op's stream is capturing a graph"):
                op.check()  # it would wait on the host: refused, and the capture goes on
            with pytest.raises(epjit.Error, match="close while the op's stream is capturing a graph"):
                op.close()  # the same, and the op stays open
            out, _ = op.combine(recv, recv_w)
        for replay in range(5):
            fresh_x, fresh_w, fresh_idx = inputs(torch, 1, 0, tokens, 60 + replay)
            x.copy_(fresh_x)
            w.copy_(fresh_w)
            idx.copy_(fresh_idx)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), identity_expected(torch, x, idx).view(torch.int16))
            got_total, _, got_indices = op.recorded_call(routing)
            assert int(got_total.item()) == int(total.item()) == tokens  # one rank: each token arrives once
            assert torch.equal(got_indices, fresh_idx)
        del graph
    comm.destroy()


def test_routings_captured_by_torch_graphs_stay_theirs():
    """Graphs captured one after another on torch's shared capture stream, each
    dropping its routing after the capture: graph A replays an eager routing,
    B and C record routings of their own (B for fewer tokens than A). None is
    handed to a later capture, so replaying A after B still sends A's tokens."""
    torch, comm = torch_and_one_rank()
    with epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm) as op:
        sizes = {"a": MAX_TOKENS - 5, "b": MAX_TOKENS - 9, "c": MAX_TOKENS - 2}
        args = {name: inputs(torch, 1, 0, tokens, 70 + i) for i, (name, tokens) in enumerate(sizes.items())}
        eager = eager_round_trip_before_capture(torch, op, *args["a"], return_routing=True)[-1]  # A's routing
        graphs, outs, maps = {}, {}, {}
        for name in sizes:
            x, w, idx = args[name]
            graphs[name] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[name]):
                if name == "a":
                    recv, recv_w, _, _, _ = op.dispatch(x, w, None, idx, routing=eager)
                    routing = eager
                else:
                    recv, recv_w, _, _, _, routing = op.dispatch(x, w, None, idx, return_routing=True)
                outs[name], _ = op.combine(recv, recv_w)
            maps[name] = op.route_map(routing).data_ptr()
            del routing, recv, recv_w
            eager = None
        assert len(set(maps.values())) == 3, maps
        for replay, order in enumerate(("abc", "bac", "cba")):
            for name in order:
                x, w, idx = args[name]
                fresh_x, _, _ = inputs(torch, 1, 0, sizes[name], 90 + replay)
                x.copy_(fresh_x)  # new payload, same routing
                graphs[name].replay()
                torch.cuda.synchronize()
                assert torch.equal(outs[name].view(torch.int16), identity_expected(torch, x, idx).view(torch.int16)), \
                    (replay, name)
        del graphs
    comm.destroy()


def test_routings_freed_while_torch_captures_leave_the_capture_whole():
    """A routing dropped while torch.cuda.graph captures (global mode: any
    thread's cuMemFree would end the capture), by the capturing thread and by
    another thread: the memory goes, the capture ends whole, and its replays
    sum right."""
    import gc
    import threading
    torch, comm = torch_and_one_rank()
    with epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm) as op:
        tokens = MAX_TOKENS - 7
        x, w, idx = inputs(torch, 1, 0, tokens, 111)
        eager_round_trip_before_capture(torch, op, x, w, idx)
        held = {"this thread": op.make_routing(), "another thread": op.make_routing()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            recv, recv_w, _, _, _ = op.dispatch(x, w, None, idx)
            del held["this thread"]
            gc.collect()
            other = threading.Thread(target=held.clear)  # the last reference goes there
            other.start()
            other.join()
            out, _ = op.combine(recv, recv_w)
        assert not held
        for replay in range(3):
            fresh_x, fresh_w, _ = inputs(torch, 1, 0, tokens, 120 + replay)
            x.copy_(fresh_x)
            w.copy_(fresh_w)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), identity_expected(torch, x, idx).view(torch.int16)), replay
        del graph
    comm.destroy()


def test_ops_closed_or_dropped_while_torch_captures_leave_the_capture_whole():
    """An op closed, and one dropped, while torch.cuda.graph captures other work
    (global mode: a wait for a stream or a free on any thread would end the
    capture): each waits for its own stream and frees its memory under the
    thread's relaxed capture mode, so the capture ends whole and replays right."""
    import gc
    import weakref
    torch, comm = torch_and_one_rank()
    x, w, idx = inputs(torch, 1, 0, MAX_TOKENS - 3, 131)
    closed = epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm)
    dropped = epjit.EpDispatchCombineOp(make_config(1, 0, "gather"), comm)
    # Three streams in a row from torch's pool are distinct: neither op's stream is the capture's.
    streams = [torch.cuda.Stream() for _ in range(3)]
    for op, stream in zip((closed, dropped), streams):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            recv, recv_w, _, _, _ = op.dispatch(x, w, None, idx)
            op.combine(recv, recv_w)
    torch.cuda.synchronize()
    del op, recv, recv_w
    gone = weakref.ref(dropped)
    a = torch.arange(4096, dtype=torch.float32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=streams[2]):
        doubled = a * 2
        closed.close()
        del dropped
        gc.collect()
        out = doubled + 1
    assert gone() is None, "the dropped op outlived the capture"
    for replay in range(3):
        a.copy_(torch.rand(4096, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, a * 2 + 1), replay
    with pytest.raises(epjit.Error, match="closed"):
        closed.check()
    del graph
    comm.destroy()


def test_from_process_group_needs_an_initialized_group():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialized here")
    with pytest.raises(epjit.Error, match="init_process_group"):
        epjit.Communicator.from_process_group()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--warm":
    os.environ["EPJIT_CACHE_DIR"] = sys.argv[2]
    for target in warm_targets():
        for world in (1, 2):
            for mode in ("gather", "scatter"):
                print(epjit.cache.warm_op(make_config(world, 0, mode, target=target)))
            print(epjit.cache.warm_op(make_config(world, 0, "gather", "fp8", target=target)))
