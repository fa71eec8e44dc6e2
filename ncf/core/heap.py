"""glibc malloc settings for array programs that allocate and free the same large buffers."""

from __future__ import annotations

import ctypes

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's initial thresholds (mallopt(3)); set explicitly, they stay fixed (no dynamic raise).
_DEFAULT_THRESHOLD = 128 << 10


def keep_freed_memory(mmap_threshold: int, keep_top: bool = True) -> bool:
    """Serve blocks below ``mmap_threshold`` bytes from the heap, reusing freed ones.

    With glibc's defaults every block above 128 KiB (adaptively up to 32 MiB) is mmapped and
    unmapped on free, so a program that frees a buffer and allocates one like it page-faults every
    page in again (docs/FACTS.md, "The C library"). Above the threshold blocks are still mapped.

    Parameters
    ----------
    mmap_threshold
        Bytes; blocks at least this large are mmapped as before.
    keep_top
        Also keep freed memory at the top of the heap (no trimming) instead of returning it to the
        OS: for a loop whose peak repeats; False returns it, so peak RSS stays that of the
        default allocator.

    Returns
    -------
    bool
        False where glibc is not the allocator (nothing changed).
    """
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    if ok and keep_top:
        ok = libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
    return bool(ok)


def release_freed_memory() -> bool:
    """End :func:`keep_freed_memory`'s reuse: both thresholds back to glibc's initial 128 KiB
    (set explicitly, so glibc no longer raises them on its own) and every free page of the heap
    returned to the OS (``malloc_trim(0)``), for a caller that lives on after the work.

    Returns
    -------
    bool
        False where glibc is not the allocator (nothing changed).
    """
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_THRESHOLD)
    ok = ok and libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_THRESHOLD)
    libc.malloc_trim(0)
    return bool(ok)


def _glibc() -> ctypes.CDLL | None:
    """glibc with ``mallopt`` and ``malloc_trim``, or None where it is not the C library (musl,
    macOS): there the allocator is left as it is."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 (AttributeError where they are missing)
    except (OSError, AttributeError):
        return None
    return libc
