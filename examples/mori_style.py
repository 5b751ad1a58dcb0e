"""A program written against MORI EPv2's Python API only (mori.cco and
mori.ops.dispatch_combine_v2), run on epjit: the one added line is
`epjit.mori.install()`, which makes `import mori...` name epjit's compat layer
when no real MORI is installed.

    torchrun --nproc-per-node 2 examples/mori_style.py
    # across hosts: nodes of LOCAL_WORLD_SIZE ranks, internode kernels between them
    EPJIT_BOOTSTRAP_ADDR=<rank 0's host address> torchrun --nnodes 2 --nproc-per-node 8 \
        --rdzv-endpoint <host:port> examples/mori_style.py

gloo carries the unique id; every rank dispatches random tokens (DeepSeek-V3's
hidden 7168, top-8 of 256 experts), identity experts return them, combine brings
them back, and each result must equal U * x (U: the token's distinct destination
ranks), computed in f32 and rounded once. Exits 1 if any rank's check fails.
"""
import os
import sys

import torch
import torch.distributed as dist

import epjit.mori

epjit.mori.install()  # the one line a MORI program adds

from mori.cco import Communicator  # noqa: E402
from mori.ops.dispatch_combine_v2 import EpDispatchCombineConfig, EpDispatchCombineOp  # noqa: E402

HIDDEN, TOPK, EXPERTS, MAX_TOKENS = 7168, 8, 256, 128


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # torchrun numbers ranks node by node; fewer per node than in all: internode.
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    nodes = {"gpu_per_node": per_node} if per_node < world else {}
    if not torch.cuda.is_available():
        sys.exit("mori_style.py: MORI's programs run on GPUs; torch sees none here")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("gloo")
    box = [Communicator.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)

    cfg = EpDispatchCombineConfig(rank=rank, world_size=world, hidden_dim=HIDDEN,
                                  max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EXPERTS // world,
                                  num_experts_per_token=TOPK, data_type=torch.bfloat16, **nodes)
    failures = 0
    generator = torch.Generator(device="cpu").manual_seed(1234 + rank)
    with Communicator.init(world, rank, box[0], **nodes) as comm:
        op = EpDispatchCombineOp(cfg, comm)
        for tokens in (MAX_TOKENS, 37, 1):
            x = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16).cuda()
            weights = torch.rand(tokens, TOPK, generator=generator).cuda()
            indices = torch.stack([torch.randperm(EXPERTS, generator=generator)[:TOPK]
                                   for _ in range(tokens)]).to(torch.int32).cuda()
            out, out_weights, _, out_indices, total, routing = op.dispatch(x, weights, None, indices,
                                                                           return_routing=True)
            received = int(total.item())
            counts = op.local_expert_count()  # after dispatch, before combine (MORI's contract)
            expert_out = out[:received]  # identity experts
            combined, _ = op.combine(expert_out, None, None, routing=routing)
            ranks = (indices.long() // cfg.num_experts_per_rank).cpu().tolist()
            copies = torch.tensor([len(set(r)) for r in ranks], dtype=torch.float32, device=x.device)
            want = (x.float() * copies[:, None]).to(torch.bfloat16)
            ok = torch.equal(combined, want)
            print(f"rank {rank}: {tokens} tokens, {received} received, {int(counts.sum())} (token, k) on local "
                  f"experts, identity check {'passed' if ok else 'FAILED'}", flush=True)
            failures += not ok
            comm.barrier()
        # The op is left to the garbage collector after this block, as MORI's examples do.
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
