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
