"""Processes: 2 Dask workers give the 1-process output; SIGKILL never leaves a partial output."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd

from ncf.names import METADATA_FILE, WORKFLOW_DIR
from tests.workflows.helpers import (
    REPO,
    SMALL,
    etl,
    metadata,
    needs_nvtabular,
    outputs,
    write_synthetic,
)


def ncf_etl(*args: str) -> list[str]:
    return [sys.executable, "-m", "ncf.cli", "etl", *args]


@needs_nvtabular
def test_two_dask_workers_give_the_one_process_output(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    etl(SMALL, one, seed=1)
    # A subprocess: the Dask LocalCluster's worker processes need a __main__ guard (ncf.cli has one).
    run = subprocess.run(
        ncf_etl("--input", str(SMALL), "--out", str(two), "--workers", "2", "--seed", "1"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert metadata(two)["workers"] == 2
    for name, frame in outputs(one).items():
        pd.testing.assert_frame_equal(outputs(two)[name], frame)
    for vocab in ("unique.userId.parquet", "unique.movieId.parquet"):
        path = f"{WORKFLOW_DIR}/categories/{vocab}"
        pd.testing.assert_frame_equal(pd.read_parquet(two / path), pd.read_parquet(one / path))


def complete(out) -> bool:
    """An output directory with metadata whose counts match its parquet files."""
    if not (out / METADATA_FILE).exists():
        return False
    meta = metadata(out)
    data = outputs(out)
    return (meta["train_rows"], meta["test_rows"], meta["negative_rows"]) == tuple(
        len(data[k]) for k in ("train", "test", "negatives")
    )


def test_sigkill_leaves_no_partial_output_and_a_rerun_succeeds(tmp_path):
    inp = write_synthetic(tmp_path / "ratings.csv", n_users=3000, n_items=2000, per_user=120)
    out = tmp_path / "etl"
    args = ncf_etl(
        "--input", str(inp), "--out", str(out), "--engine", "pandas", "--negatives", "400"
    )
    t0 = time.perf_counter()
    subprocess.run(args, cwd=REPO, check=True, capture_output=True, timeout=120)
    duration = time.perf_counter() - t0
    shutil.rmtree(out)
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    for _ in range(5):
        # A random moment of a whole run, mostly past the start-up (imports take half of it).
        delay = rng.uniform(0.4, 1.0) * duration
        proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Either no output at all, or a complete one (the run finished before the kill).
        if out.exists():
            assert complete(out), (
                f"partial output after SIGKILL at {delay:.2f} s (KILL_SEED={seed})"
            )
            break
    run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert complete(out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
