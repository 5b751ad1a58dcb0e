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


def gpu_of(rank):
    return rank // ranks_per_gpu()


def cuda_ranks(gpus, wanted):
    """How many of `wanted` ranks the GPUs hold."""
    return min(gpus * ranks_per_gpu(), wanted)
