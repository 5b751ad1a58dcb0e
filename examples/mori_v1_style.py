"""A program written against MORI's first (v1) Python API only, making the calls
vLLM's MORI backend makes (MoriAll2AllManager, MoriPrepareAndFinalize), run on
epjit: the one added line is `epjit.mori.install()`.

    torchrun --nproc-per-node 2 examples/mori_v1_style.py
    # no GPU: host ranks with CPU tensors
    EPJIT_MORI_EXAMPLE_DEVICE=cpu torchrun --nproc-per-node 2 examples/mori_v1_style.py

The torch group is registered as "mori" and mori.shmem set up over it; the op is
built from vLLM's config (FP8 dispatch with a per-token scale, BF16 combine,
IntraNode); each forward pass quantizes its tokens to fp8, dispatches them by
keyword, runs identity experts that dequantize the received rows, and combines the
bf16 rows with the router weights into the output buffer. Each result must equal
U * dequant(x) (U: the token's distinct destination ranks), summed in f32 and
rounded once. Exits 1 if any rank's check fails.
"""
import os
import sys

import torch
import torch.distributed as dist

import epjit.mori

epjit.mori.install()  # the one line a MORI program adds

import mori  # noqa: E402

HIDDEN, TOPK, EXPERTS, MAX_TOKENS = 7168, 8, 256, 256


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    on_gpu = os.environ.get("EPJIT_MORI_EXAMPLE_DEVICE", "cuda") == "cuda"
    if on_gpu:
        if not torch.cuda.is_available():
            sys.exit("mori_v1_style.py: torch sees no GPU; EPJIT_MORI_EXAMPLE_DEVICE=cpu runs host ranks")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())  # ranks may share a GPU
    device = "cuda" if on_gpu else "cpu"
    dist.init_process_group("gloo")
    cpu_group = dist.new_group(backend="gloo")
    torch._C._distributed_c10d._register_process_group("mori", cpu_group)       # MoriAll2AllManager.__init__
    # MORI's call takes the device from torch; host ranks (epjit only) name theirs.
    mori.shmem.shmem_torch_process_group_init("mori", **({} if on_gpu else dict(device="host")))

    fp8 = torch.float8_e4m3fnuz if getattr(torch.version, "hip", None) and "gfx942" in \
        torch.cuda.get_device_properties(0).gcnArchName else torch.float8_e4m3fn
    config = mori.ops.EpDispatchCombineConfig(                                  # _make_all2all_kwargs
        rank=rank, world_size=world, data_type=fp8, hidden_dim=HIDDEN, scale_dim=1, scale_type_size=4,
        max_token_type_size=torch.bfloat16.itemsize, max_num_inp_token_per_rank=MAX_TOKENS,
        num_experts_per_rank=EXPERTS // world, num_experts_per_token=TOPK, warp_num_per_block=16, block_num=80,
        kernel_type=mori.ops.EpDispatchCombineKernelType.IntraNode, rdma_block_num=0, gpu_per_node=min(8, world))
    handle = mori.ops.EpDispatchCombineOp(config)
    print(f"rank {rank}: {handle.backend_name}, {mori.shmem.shmem_npes()} PEs", flush=True)

    failures = 0
    generator = torch.Generator().manual_seed(4321 + rank)
    for tokens in (MAX_TOKENS, 37, 1):
        a1 = torch.randn(tokens, HIDDEN, generator=generator).to(torch.bfloat16).to(device)
        topk_weights = torch.rand(tokens, TOPK, generator=generator).to(device)
        topk_ids = torch.stack([torch.randperm(EXPERTS, generator=generator)[:TOPK]
                                for _ in range(tokens)]).to(torch.int32).to(device)
        # prepare(): per-token fp8 quantization, then the keyword dispatch
        scale = (a1.float().abs().amax(dim=1, keepdim=True) / torch.finfo(fp8).max).clamp(min=1e-8)
        q = (a1.float() / scale).to(fp8)
        out, out_w, out_s, out_idx, recv = handle.dispatch(input=q, weights=topk_weights, scales=scale,
                                                           indices=topk_ids)
        fused_expert_output = (out.float() * out_s).to(torch.bfloat16)          # identity experts
        # finalize(): combine by keyword, copy the first tokens into the output
        output = torch.empty(tokens, HIDDEN, dtype=torch.bfloat16, device=device)
        combined, _ = handle.combine(input=fused_expert_output, weights=topk_weights, indices=topk_ids)
        output.copy_(combined[:tokens], non_blocking=True)
        if on_gpu:
            torch.cuda.synchronize()
        copies = torch.tensor([len({e // config.num_experts_per_rank for e in row}) for row in topk_ids.tolist()],
                              dtype=torch.float32, device=device)
        want = ((q.float() * scale).to(torch.bfloat16).float() * copies[:, None]).to(torch.bfloat16)
        ok = torch.equal(output, want)
        print(f"rank {rank}: {tokens} tokens, {int(recv[0])} received, identity check "
              f"{'passed' if ok else 'FAILED'}", flush=True)
        failures += not ok
    mori.shmem.shmem_finalize()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
