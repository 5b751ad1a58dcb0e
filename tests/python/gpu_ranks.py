"""Where the Python GPU tests put their rank processes: one per GPU, or, with
EPJIT_GPU_TEST_RANKS_PER_GPU=N (as gpu_ep_test reads it), up to N per GPU, so
a host with fewer GPUs than ranks still runs the multi-rank checks. The GPU
then time-slices the rank processes: a check of results, not of speed."""
import os


def ranks_per_gpu():
    text = os.environ.get("EPJIT_GPU_TEST_RANKS_PER_GPU", "1")
    if not text.isdigit() or not 1 <= int(text) <= 8:
        raise ValueError(f"EPJIT_GPU_TEST_RANKS_PER_GPU={text!r}: expected a whole number from 1 to 8")
    return int(text)


def gpu_device():
    """epjit's device kind for torch's GPUs: "hip" under a ROCm build of torch, else
    "cuda". Ops on it take the GPU's own target (sm90, sm100, gfx942, ...) when
    their config names none."""
    import torch
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def warm_targets():
    """The targets `--warm` builds kernels for: EPJIT_GPU_WARM_TARGETS (comma-separated,
    as scripts/gpu/prepare.sh passes GPU_TARGETS), default sm90."""
    return [t for t in os.environ.get("EPJIT_GPU_WARM_TARGETS", "sm90").split(",") if t]


def gpu_of(rank):
    return rank // ranks_per_gpu()


def cuda_ranks(gpus, wanted):
    """How many of `wanted` ranks the GPUs hold."""
    return min(gpus * ranks_per_gpu(), wanted)


def skip_unless_ranks_fit(device, world):
    """Skips (pytest) a test of `world` CUDA ranks the GPUs cannot hold, saying why."""
    if device != "cuda":
        return
    import pytest
    import torch
    if cuda_ranks(torch.cuda.device_count(), world) < world:
        pytest.skip(f"{world} CUDA ranks need {world} GPUs (torch sees {torch.cuda.device_count()}; "
                    f"EPJIT_GPU_TEST_RANKS_PER_GPU={ranks_per_gpu()})")


def run_rank_processes(target, world, args_of, timeout=300):
    """One spawned process per rank running target(*args_of(rank), results); each
    puts its failures ("" when none) on `results`. Asserts that none failed and all
    exited cleanly."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=target, args=(*args_of(r), results)) for r in range(world)]
    for p in procs:
        p.start()
    got = [results.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout=120)
    failed = [g for g in got if g]
    assert not failed, "\n".join(failed)
    assert all(p.exitcode == 0 for p in procs), f"exit codes {[p.exitcode for p in procs]}"
