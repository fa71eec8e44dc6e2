"""ncf.core.heap: freed large blocks are reused instead of faulted in again (glibc)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Allocate and touch a 64 MiB array twice; print the page faults of the second time.
PROGRAM = """
import resource, sys
import numpy as np
from ncf.core import heap
# Small pages, so that the count is of 4 KiB pages whatever the kernel's transparent huge pages.
np.core.multiarray._set_madvise_hugepage(False)
if sys.argv[1] == "keep":
    assert heap.keep_freed_memory(1 << 30)
a = np.ones(8 << 20)  # 64 MiB
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(8 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _second_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_freed_block_is_reused_without_page_faults():
    # 64 MiB is 16,384 pages of 4 KiB: mapped afresh by default, reused from the heap when kept.
    assert _second_faults("default") > 4_000
    assert _second_faults("keep") < 400


# Keep, touch and free 64 MiB; print the resident MiB before and after release_freed_memory.
RELEASE = """
import numpy as np
from ncf.core import heap
np.core.multiarray._set_madvise_hugepage(False)

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

assert heap.keep_freed_memory(1 << 30)
a = np.ones(8 << 20)  # 64 MiB
del a
kept = rss_mib()
assert heap.release_freed_memory()
print(kept, rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_release_returns_the_kept_heap():
    out = subprocess.run(
        [sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True
    )
    kept, released = map(float, out.stdout.split())
    # The freed 64 MiB stays resident while kept and is returned by the release.
    assert kept - released > 48, (kept, released)
