"""``ncf bench warm-start`` end to end on a slice of ml-latest-small: real ETL and training runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "data" / "ml-latest-small" / "ratings.csv"


@pytest.mark.slow
def test_cold_and_warm_runs_on_day_two(tmp_path: Path):
    ratings = pd.read_csv(SMALL)
    path = tmp_path / "ratings.csv"
    ratings[ratings.userId <= 60].to_csv(path, index=False)
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "ncf.bench.warm_start", "--input", str(path), "--epochs", "1",
           "--threads", "1", "--work", str(tmp_path / "work"), "--results-dir", str(results)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((results / "warm-start.json").read_text())
    assert [r["run"] for r in doc["rows"]] == ["day 1", "day 2 cold", "day 2 warm"]
    assert all(r["epochs_run"] == 1 for r in doc["rows"])
    warm = json.loads((tmp_path / "work" / "day-2-warm-seed1" / "metrics.json").read_text())
    assert warm["init_from"]["checkpoint"].endswith("day-1-seed1/best.pt")
    assert warm["init_from"]["users"][1] > warm["init_from"]["users"][0]
