"""Processes: 2 Dask workers give the 1-process output; SIGKILL never leaves a partial output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from ncf.core import faults
from ncf.core.names import METADATA_FILE, WORKFLOW_DIR
from tests.workflows.helpers import (
    REPO,
    SMALL,
    etl,
    metadata,
    needs_nvtabular,
    outputs,
    write_synthetic,
)
from tests.workflows.test_partitioned import assert_same_output


def ncf_etl(*args: str) -> list[str]:
    return [sys.executable, "-m", "ncf.cli", "etl", *args]


@needs_nvtabular
def test_two_dask_workers_give_the_one_process_output(tmp_path):
    # Three partitions on a local cluster of two worker processes: the in-memory output.
    one, two = tmp_path / "one", tmp_path / "two"
    etl(SMALL, one, seed=1)
    # A subprocess: the Dask LocalCluster's worker processes need a __main__ guard (ncf.cli has one).
    args = ("--workers", "2", "--partitions", "3", "--seed", "1")
    run = subprocess.run(
        ncf_etl("--input", str(SMALL), "--out", str(two), *args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (metadata(two)["workers"], metadata(two)["partitions"]) == (2, 3)
    assert_same_output(one, two)
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


# Commits (ncf.core.atomic renames) of one ETL run with --holdout valid,test: the Merlin schema of
# each of its five datasets, metadata.json, config.json and the output marker inside the temporary
# directory, then the directory itself.
ETL_COMMITS = 9


@pytest.mark.parametrize("force", [False, True], ids=["fresh", "over-previous"])
# The first commit, the last ones inside the temporary directory, the directory's own rename, and
# one past it (the run completes, which shows ETL_COMMITS is right).
@pytest.mark.parametrize("n", [1, ETL_COMMITS - 1, ETL_COMMITS, ETL_COMMITS + 1])
def test_sigkill_leaves_the_previous_output_and_a_rerun_gives_the_uninterrupted_one(
    tmp_path, n, force
):
    inp = write_synthetic(tmp_path / "ratings.csv", n_users=300, n_items=200, per_user=30)
    reference, out = tmp_path / "reference", tmp_path / "etl"
    etl(inp, reference, engine="pandas", eval_negatives=50, seed=1)
    args = ncf_etl(
        *("--input", str(inp), "--out", str(out), "--engine", "pandas"),
        *("--eval-negatives", "50", "--seed", "1", *(["--force"] if force else [])),
    )
    if force:  # a previous, different output that the killed run was replacing
        etl(inp, out, engine="pandas", eval_negatives=50, seed=2)
        previous = outputs(out)
    killed = subprocess.run(
        args,
        cwd=REPO,
        env={**os.environ, faults.ENV: f"{faults.ATOMIC_COMMIT}:{n}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if n > ETL_COMMITS:  # past the last commit: the run completes (ETL_COMMITS is right)
        assert killed.returncode == 0, killed.stderr[-3000:]
    else:
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        if force:
            assert complete(out)
            for name, frame in previous.items():
                pd.testing.assert_frame_equal(outputs(out)[name], frame)
        else:
            assert not out.exists()
        run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
    assert complete(out)
    for name, frame in outputs(reference).items():
        pd.testing.assert_frame_equal(outputs(out)[name], frame)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
