"""``ncf bench large-batch`` end to end on tiny synthetic data: three real ``ncf train`` runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_three_runs_at_the_rule_s_learning_rates(tmp_path: Path):
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "ncf.bench.large_batch", "--scale", "0.001", "--base-batch",
           "1024", "--epochs", "1", "--warmup-epochs", "0.5", "--threads", "1", "--data",
           str(tmp_path / "data"), "--work", str(tmp_path / "work"), "--results-dir", str(results)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((results / "large-batch.json").read_text())
    base, same, rule = doc["rows"]
    assert (base["batch"], same["batch"], rule["batch"]) == (1024, 4096, 4096)
    assert base["lr"] == same["lr"] and rule["lr"] == pytest.approx(2 * base["lr"])
    assert (rule["lr_batch"], rule["warmup_epochs"]) == (1024, 0.5) and same["lr_batch"] == 0
    assert base["steps_per_epoch"] == pytest.approx(4 * rule["steps_per_epoch"], abs=3)
    assert rule["vs_base"] == pytest.approx(rule["hr@10"] - base["hr@10"], abs=1e-4)
    assert doc["protocol"] == "valid-selected" and "rule_within_tolerance" in doc
