"""Run a module under torchrun as two gloo processes on loopback (one call, one job).

The tests that compare a distributed run with another (``test_grad_compression``,
``test_sharding``, ``test_mf``) start their job here: torchrun's start-up is paid once per job.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_two_ranks(module: str, *args: str, timeout: int = 240) -> None:
    """``python -m module *args`` on 2 local ranks; fails the test with the job's stderr."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", module, *args]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]


def rank_record(out: Path, run: str, rank: int = 0) -> dict:
    """The JSON record rank ``rank`` of a job wrote for ``run`` (``out/run/rank<r>.json``)."""
    return json.loads((out / run / f"rank{rank}.json").read_text())
