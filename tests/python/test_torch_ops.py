"""epjit.torch_ops: the op's calls as torch custom ops under torch.compile.
On host ranks (CPU tensors) always, on a GPU (its own target: sm90, sm100,
gfx942, ...) where torch finds one, with mode="reduce-overhead" (CUDA or HIP
graphs) there. What a compiled function returns
must equal eager execution of the same calls, also for an output kept across
the op's next call (copy semantics: docs/PYTHON.md "torch.compile"), with no
graph break. Skipped without torch."""
import pytest

import epjit

torch = pytest.importorskip("torch")
from epjit import torch_ops  # noqa: E402

HIDDEN, TOPK, EPR, MAX_TOKENS = 64, 3, 5, 13


def devices():
    found = ["host"]
    if torch.cuda.is_available():
        found.append("hip" if getattr(torch.version, "hip", None) else "cuda")
    return found


@pytest.fixture(params=devices())
def op(request):
    device = request.param  # a GPU's ops take its own target
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), device=device,
                                   device_ordinal=0 if device != "host" else -1)
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=HIDDEN,
                                           max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EPR,
                                           num_experts_per_token=TOPK, data_type="bf16", enable_std_moe=True)
    made = epjit.EpDispatchCombineOp(config, comm)
    made.device = "cpu" if device == "host" else "cuda"  # torch's name for its GPUs, ROCm's too
    torch._dynamo.reset()
    yield made
    made.close()
    comm.destroy()


def inputs(device, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, HIDDEN, generator=g).to(torch.bfloat16)
    w = torch.rand(tokens, TOPK, generator=g)
    idx = torch.stack([torch.randperm(EPR, generator=g)[:TOPK] for _ in range(tokens)]).to(torch.int32)
    return x.to(device), w.to(device), idx.to(device)


def round_trip(op, x, w, idx):
    """A dispatch and the combine of what it delivered, each row scaled by 2."""
    recv, recv_w, _, recv_idx, total = torch_ops.dispatch(op, x, w, None, idx)
    out, out_w = torch_ops.combine(op, recv * 2, recv_w, num_tokens=x.shape[0])
    return recv, total, out, out_w


def std_moe_round_trip(op, x, w, idx):
    torch_ops.dispatch(op, x, w, None, idx)
    tokens, counts, sources = torch_ops.std_moe_pack(op)
    out = torch_ops.std_moe_combine(op, tokens * 3, num_tokens=x.shape[0])
    return tokens, counts, out


def received(recv, total):
    """The delivered rows in a fixed order: rows past the count are not written,
    and rows land in arrival order, which differs between calls."""
    return torch.unique(recv[:int(total[0])].cpu().view(torch.int16), dim=0)


def check_same(got, want):
    recv, total, *rest = got
    assert torch.equal(total, want[1])
    assert torch.equal(received(recv, total), received(want[0], want[1]))
    for a, b in zip(rest, want[2:]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_outputs_kept_across_the_next_call_equal_eager(op, mode):
    if mode and op.device == "cpu":
        pytest.skip("reduce-overhead captures CUDA graphs: GPU only")
    a, b = inputs(op.device, 11, 1), inputs(op.device, 7, 2)
    want_a = [t.clone() for t in round_trip(op, *a)]
    want_b = round_trip(op, *b)
    # The eager outputs are already copies: call a's survive call b.
    check_same([t.clone() for t in round_trip(op, *a)], want_a)
    explained = torch._dynamo.explain(round_trip)(op, *a)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(round_trip, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records, then replays its graph
        got_a = compiled(op, *a)
        got_b = compiled(op, *b)
        check_same(got_a, want_a)  # held across call b, read after it
        check_same(got_b, want_b)


def test_compiled_std_moe_equals_eager(op):
    a, b = inputs(op.device, 12, 3), inputs(op.device, 5, 4)
    want_a = [t.clone() for t in std_moe_round_trip(op, *a)]
    want_b = std_moe_round_trip(op, *b)
    assert torch._dynamo.explain(std_moe_round_trip)(op, *a).graph_break_count == 0
    compiled = torch.compile(std_moe_round_trip, fullgraph=True)
    got_a, got_b = compiled(op, *a), compiled(op, *b)
    for got, want in ((got_a, want_a), (got_b, want_b)):
        tokens, counts, out = got
        assert torch.equal(counts, want[1]) and torch.equal(out, want[2])
        for e in range(EPR):  # packed rows past an expert's count are not written; arrival order
            n = int(counts[e])
            assert torch.equal(received(tokens[e], counts[e:e + 1]), received(want[0][e], want[1][e:e + 1]))
    assert int(want_a[1].sum()) == 12 * TOPK  # each token on TOPK distinct local experts


def test_combine_with_the_wrong_token_count_is_refused(op):
    x, w, idx = inputs(op.device, 9, 5)
    recv, recv_w, _, _, _ = torch_ops.dispatch(op, x, w, None, idx)
    with pytest.raises(epjit.Error, match="num_tokens=8, but the last dispatch had 9 rows"):
        torch_ops.combine(op, recv, recv_w, num_tokens=8)
