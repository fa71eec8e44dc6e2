"""Per-process runtime settings for training and evaluation: threads, allocator, TF32, determinism."""

from __future__ import annotations

import os

import torch

from ncf.core import heap

# Blocks below this come from the heap and are kept for reuse: a CPU step's buffers (<= 64 MiB
# activations of a 48Ki micro-batch, 71 MB embedding gradients). One-off buffers above it (the
# epoch's permutation and negatives, the positives bitmap) are still mapped and unmapped.
MMAP_THRESHOLD = 128 << 20


def keep_freed_memory() -> bool:
    """Keep a training step's freed buffers for the next micro-batch instead of returning them
    to the OS (158M page faults per DLE epoch otherwise: docs/FACTS.md). Call it once setup is
    done: what setup freed before is returned to the OS as usual. False where glibc is not the
    allocator."""
    return heap.keep_freed_memory(MMAP_THRESHOLD)


def default_threads(local_world_size: int) -> int:
    """CPU threads per process: the usable cores shared evenly between this host's ranks."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world_size))


def configure(device: torch.device, threads: int, deterministic: bool, tf32: bool = True) -> None:
    """Apply the runtime settings for one training/evaluation process.

    Parameters
    ----------
    device
        The training device.
    threads
        intra-op CPU threads (``torch.set_num_threads``).
    deterministic
        Bitwise-reproducible runs (``torch.use_deterministic_algorithms``; cuBLAS workspace config).
    tf32
        Allow TF32 matmuls on GPUs that have them (Ampere and later), as DLE does.
    """
    if threads < 1:
        raise ValueError(f"--threads {threads}: must be >= 1")
    torch.set_num_threads(threads)
    if deterministic:
        # Must be set before cuBLAS initialises; harmless on CPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = not deterministic
