"""bench/train.py end to end on a tiny ETL split: DLE's step and ours, sampling, a timed run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ncf.bench import entry
from ncf.bench import train as bench_train
from ncf.bench.train_dle import time_dle_steps
from ncf.models.data import load_etl


def test_points_sampling_and_timed_run(etl_dir: Path, tmp_path: Path):
    argv = [
        "--data",
        str(etl_dir),
        "--batch-sizes",
        "512",
        "--precisions",
        "fp32",
        "--dle-baseline",
        "--procs",
        "1",
        "--steps",
        "1",
        "--epochs-run",
        "1",
        "--results-dir",
        str(tmp_path),
    ]
    assert entry.main(bench_train, argv) == 0
    payload = json.loads((tmp_path / "train.json").read_text())
    rows = payload["rows"]
    assert [(r["procs"], r["batch"], r["precision"]) for r in rows] == [
        (1, 512, "dle"),
        (1, 512, "fp32"),
    ]
    assert all(r["samples_per_s"] > 0 and r["peak_rss_gib"] > 0 for r in rows)
    sampling = payload["sampling"]
    assert sampling["exact_positive_rate"] == 0.0 and sampling["approximate_positive_rate"] > 0.0
    timed = payload["timed_run"]
    assert timed["epochs_run"] == 1 and timed["best_accuracy"] > 0
    assert "| dle |" in (tmp_path / "train.md").read_text()


@pytest.mark.parametrize("mode", ["tf32", "amp", "bf16"])
def test_dle_gpu_modes_are_refused_on_cpu(etl_dir: Path, mode: str):
    data = load_etl(etl_dir, torch.device("cpu"))
    with pytest.raises(ValueError, match=f"DLE step mode '{mode}'"):
        time_dle_steps(data, 256, 0, 1, torch.device("cpu"), mode)
