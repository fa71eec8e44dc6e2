"""Per-process runtime settings for training and evaluation: threads, allocator, TF32, determinism."""

from __future__ import annotations

import ctypes
import os

import torch

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Blocks below this come from the heap and are kept for reuse: a CPU step's buffers (<= 64 MiB
# activations of a 48Ki micro-batch, 71 MB embedding gradients). One-off buffers above it (the
# epoch's permutation and negatives, the positives bitmap) are still mapped and unmapped.
MMAP_THRESHOLD = 128 << 20


def keep_freed_memory() -> bool:
    """Tell glibc malloc to keep freed blocks instead of returning them to the OS.

    A training step allocates and frees the same large activation buffers every micro-batch; with
    glibc's defaults each one above 128 KB (adaptively up to 32 MB) is mmapped, freed with munmap
    and page-faulted in again on its next use (158M page faults per DLE epoch: docs/FACTS.md).
    Keeping them in the heap makes elementwise ops several times faster. Call it once setup is done:
    what setup freed before is returned to the OS as usual. Returns False where glibc is not the
    allocator.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(
            _M_TRIM_THRESHOLD, 2**31 - 1
        )
    except (OSError, AttributeError):
        return False
    return bool(ok)


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
