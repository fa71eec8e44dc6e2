"""SIGKILL at a random moment, then --resume: same final metrics; checkpoints loadable throughout."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from models import checkpoint, train
from models.fit import METRICS_FILE
from tests.models.conftest import FAST, parse

# Small batches: ~100 optimizer steps per epoch, so the run lasts long enough to be killed mid-way.
ARGS = [*FAST, "--batch-size", "64", "--epochs", "6", "--deterministic"]


def _check_all_loadable(run: Path) -> int:
    """Verify and load every checkpoint the manifest lists; returns how many there were."""
    manifest = checkpoint.read_manifest(run)
    for name in manifest:
        if (run / name).exists():
            checkpoint.verify(run / name)
            torch.load(run / name, weights_only=True)
    return len(manifest)


def test_kill_then_resume_matches_uninterrupted(etl_dir: Path, tmp_path: Path):
    reference = tmp_path / "reference"
    assert train.run(parse(train, ["--data", etl_dir, "--out", reference, *ARGS])) == 0
    run = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "ncf.cli",
        "train",
        "--data",
        str(etl_dir),
        "--out",
        str(run),
        *map(str, ARGS),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delay = random.Random(os.urandom(8)).uniform(0.0, 0.6)
    try:
        deadline = time.monotonic() + 120
        while (
            not (run / checkpoint.LAST).exists()
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        kill_at = time.monotonic() + delay
        checks = 0
        while time.monotonic() < kill_at and proc.poll() is None:
            checks += _check_all_loadable(run) > 0  # loadable while being rewritten
        assert proc.poll() is None, (
            f"run finished before the kill ({delay:.2f} s after its first checkpoint)"
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _check_all_loadable(run) >= 1
    killed_at = torch.load(run / checkpoint.LAST, weights_only=True)["epoch"]
    assert killed_at < 5, f"killed after the last epoch (delay {delay:.2f} s)"
    assert train.run(parse(train, ["--data", etl_dir, "--out", run, *ARGS, "--resume"])) == 0
    got = json.loads((run / METRICS_FILE).read_text())
    want = json.loads((reference / METRICS_FILE).read_text())
    for key in ("hr@10", "ndcg@10", "final_hr@10", "final_ndcg@10", "best_epoch", "train_loss"):
        assert got[key] == want[key], (key, delay, killed_at)
    a = torch.load(run / checkpoint.BEST, weights_only=True)["model"]
    b = torch.load(reference / checkpoint.BEST, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
