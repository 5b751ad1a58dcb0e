"""What one small call from Python is made of, on one GPU (world 1, one token of
DeepSeek-V3's shape): the wrapper's round trip, the native calls alone, and the
torch calls a binding could make per argument (attributes, __dlpack__, the
current-stream queries, from_dlpack). µs per call; cProfile of the round trip last.

    python benchmarks/python_call_pieces.py
"""
import cProfile
import pstats

import torch

import epjit
from mori_overhead import timed  # beside this script


def main():
    torch.cuda.set_device(0)
    hidden, topk, experts = 7168, 8, 256
    comm = epjit.Communicator.init(1, 0, epjit.Communicator.get_unique_id(), device="cuda")
    config = epjit.EpDispatchCombineConfig(rank=0, world_size=1, hidden_dim=hidden, max_num_inp_token_per_rank=128,
                                           num_experts_per_rank=experts, num_experts_per_token=topk, target="sm90")
    op = epjit.EpDispatchCombineOp(config, comm)
    x = torch.randn(1, hidden, device="cuda").to(torch.bfloat16)
    staged = torch.randn(op.capacity, hidden, device="cuda").to(torch.bfloat16)
    w = torch.rand(1, topk, device="cuda")
    idx = torch.randperm(experts)[:topk].view(1, topk).to(torch.int32).cuda()
    native = op._op

    def round_trip():
        out = op.dispatch(x, w, None, idx)
        op.combine(out[0], out[1])

    def native_round_trip():
        native.dispatch(x, w, None, idx)
        native.combine(staged, None)

    routing = native.make_routing()

    def native_recording(keep_call):
        def run():
            native.dispatch(x, w, None, idx, routing, None, None, keep_call)
            native.combine(staged, None)
        return run

    ids = native.dispatch(x, w, None, idx)
    native.combine(staged, None)
    rows = [("python round trip", round_trip),
            ("native dispatch + combine (no weights)", native_round_trip),
            ("the same, recording a routing", native_recording(False)),
            ("the same, recording a routing that keeps the call", native_recording(True)),
            ("x.data_ptr()", lambda: x.data_ptr()),
            ("x.dtype, is_cuda, get_device(), is_contiguous(), shape, data_ptr()",
             lambda: (x.dtype, x.is_cuda, x.get_device(), x.is_contiguous(), x.shape, x.data_ptr())),
            ("x.__dlpack__()", lambda: x.__dlpack__()),
            ("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0)),
            ("torch.cuda.current_stream()", lambda: torch.cuda.current_stream()),
            ("native use_stream(0)", lambda: native.use_stream(0)),
            ("native view + torch.from_dlpack", lambda: torch.from_dlpack(native.view(ids[1])))]
    for name, fn in rows:
        print(f"{name}: {timed(fn, 2000, warmup=200):.2f} us", flush=True)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3000):
        round_trip()
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)
    op.close()
    comm.destroy()


if __name__ == "__main__":
    main()
