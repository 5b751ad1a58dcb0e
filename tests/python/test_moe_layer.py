"""examples/moe_layer.py's numpy path at its CI shape: a DeepSeek-style MoE
block (softmax top-k router, SwiGLU experts through the std-MoE layout,
weighted combine) on two host ranks against the block computed in f32 on one
process. The torch path (against all_to_all_single over NCCL) runs on GPUs."""
import importlib.util
import pathlib

import numpy as np

_path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "moe_layer.py"
_spec = importlib.util.spec_from_file_location("moe_layer", _path)
moe_layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moe_layer)


def test_moe_block_through_epjit_matches_the_f32_block():
    shape = moe_layer.Shape(world=2, hidden=64, ffn=96, experts=8, topk=3, max_tokens=13)
    errors = moe_layer.check_numpy(shape, tokens=13)
    # bf16 rounds each expert's output and each sum once: about 2^-8 of the range.
    assert max(errors) < 0.02, errors


def test_the_reference_tells_a_wrong_block_apart():
    """The comparison can fail: unweighted expert outputs are far off."""
    shape = moe_layer.Shape(world=1, hidden=64, ffn=96, experts=8, topk=3, max_tokens=13)
    router, experts = moe_layer.make_weights(shape)
    x = moe_layer.bf16(np.random.default_rng(5).normal(0, 1, (13, 64))).astype(np.float32)
    want = moe_layer.forward_reference(x, router, experts, shape.topk)
    indices, _ = moe_layer.route(x, router, shape.topk)
    unweighted = sum(np.concatenate([moe_layer.swiglu(x[t:t + 1], *experts[indices[t, j]]) for t in range(13)])
                     for j in range(shape.topk))
    assert np.abs(unweighted - want).max() / np.abs(want).max() > 0.1


def test_torch_layers_on_host_ranks():
    """The torch path on two host ranks (CPU tensors, gloo, torch._grouped_mm):
    epjit's layer against the NCCL-style layer, and the two-micro-batch
    schedule through the split calls against the micro-batches one after the
    other, bit for bit (the example exits nonzero on any mismatch). Needs torch."""
    import os
    import subprocess
    import sys

    import pytest
    pytest.importorskip("torch")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--standalone", str(_path), "--torch", "--device", "cpu", "--hidden", "64",
                          "--ffn", "96", "--experts", "8", "--topk", "3", "--tokens", "1,13,40"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert run.stdout.count('"rel_error_vs_nccl"') == 3, run.stdout
