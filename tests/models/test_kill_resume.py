"""`ncf train` killed at chosen points (NCF_FAULT), then --resume: the same final metrics and
weights as an uninterrupted run, and every checkpoint left on disk verifies and loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ncf.core import faults
from ncf.models import checkpoint, train
from ncf.models.trainer import METRICS_FILE
from tests.models.conftest import FAST, parse

# 1320 training rows x (1 + 4 negatives) / batch 64: 104 optimizer steps per epoch, 6 epochs.
ARGS = [*FAST, "--batch-size", "64", "--epochs", "6", "--deterministic"]
STEPS_PER_EPOCH = 104
# Checkpoint commits (ncf.core.atomic renames) of this run, in order: each checkpoint.save is three
# (manifest listing old and new digest, the .pt file, manifest listing the new digest only).
# Commit 1 is RUN/config.json; epoch 0: best.pt 2-4, last.pt 5-7; epoch 1: best.pt 8-10, last.pt
# 11-13; after that it depends on which epochs improve HR (the stack's rounding decides), so the
# last two commits, metrics.json and learning_curve.png, are counted on the reference run.
CASES = {
    # fault: (epochs last.pt may hold after the kill; None: no last.pt yet)
    "mid-epoch-0": (f"{faults.OPTIMIZER_STEP}:{STEPS_PER_EPOCH // 2}", {None}),
    # Epoch 1's checkpoints are written in the background while epoch 2 trains.
    "mid-epoch-2": (f"{faults.OPTIMIZER_STEP}:{2 * STEPS_PER_EPOCH + 52}", {0, 1}),
    # Only best.pt: --resume refuses (best.pt has no optimizer state), --force starts over.
    "before-first-last.pt": (f"{faults.ATOMIC_COMMIT}:6", {None}),
    "before-epoch-1-last.pt": (f"{faults.ATOMIC_COMMIT}:12", {0}),
    "before-epoch-1-manifest": (f"{faults.ATOMIC_COMMIT}:13", {1}),
    "before-metrics.json": ("metrics.json", {5}),  # the reference run's last commit but one
}
COMPARED = ("hr@10", "ndcg@10", "final_hr@10", "final_ndcg@10", "best_epoch", "train_loss")


@pytest.fixture(scope="module")
def reference(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run."""
    out = tmp_path_factory.mktemp("reference") / "run"
    with pytest.MonkeyPatch.context() as mp:  # count its commits: a plan that never fires
        mp.setattr(faults, "_PLAN", (faults.ATOMIC_COMMIT, 10**9))
        mp.setattr(faults, "_seen", 0)
        assert train.run(parse(train, ["--data", etl_dir, "--out", out, *ARGS])) == 0
        (out.parent / "commits").write_text(str(faults._seen))
    return out


def _check_all_loadable(run: Path) -> None:
    """Every checkpoint on disk matches a digest its manifest lists, and loads."""
    for name in (checkpoint.BEST, checkpoint.LAST):
        if (run / name).exists():
            checkpoint.verify(run / name)
            torch.load(run / name, weights_only=True)


def _killed_run(etl_dir: Path, run: Path, fault: str) -> None:
    argv = [sys.executable, "-m", "ncf.cli", "train", "--data", str(etl_dir), "--out", str(run)]
    env = {**os.environ, faults.ENV: fault}
    done = subprocess.run(
        [*argv, *map(str, ARGS)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


@pytest.mark.parametrize("case", list(CASES))
def test_kill_then_resume_matches_uninterrupted(etl_dir: Path, tmp_path: Path, reference, case):
    fault, epochs = CASES[case]
    if fault == "metrics.json":
        commits = int((reference.parent / "commits").read_text())
        fault = f"{faults.ATOMIC_COMMIT}:{commits - 1}"
    run = tmp_path / "killed"
    _killed_run(etl_dir, run, fault)
    _check_all_loadable(run)
    last = run / checkpoint.LAST
    killed_at = torch.load(last, weights_only=True)["epoch"] if last.exists() else None
    assert killed_at in epochs, f"{fault}: last.pt holds epoch {killed_at}, expected {epochs}"
    assert not (run / METRICS_FILE).exists()
    again = ["--data", etl_dir, "--out", run, *ARGS, "--resume"]
    if killed_at is None and (run / checkpoint.BEST).exists():  # a finished epoch, no last.pt
        before = {p.name: p.read_bytes() for p in run.iterdir()}
        with pytest.raises(ValueError, match="last.pt is missing.*--force to start over"):
            train.run(parse(train, again))
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing discarded
        again[-1] = "--force"
    assert train.run(parse(train, again)) == 0
    got = json.loads((run / METRICS_FILE).read_text())
    want = json.loads((reference / METRICS_FILE).read_text())
    assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}
    a = torch.load(run / checkpoint.BEST, weights_only=True)["model"]
    b = torch.load(reference / checkpoint.BEST, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not [p.name for p in run.iterdir() if p.name.startswith(".tmp-")]
