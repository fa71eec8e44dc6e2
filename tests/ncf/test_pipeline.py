"""``ncf run`` end to end on the bundled data: every stage, a real tritonserver, a complete report,
and the model figures pinned (``run_pin.json``): a refactoring leaves them bit for bit as they were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ncf.bench.common import machine_info
from ncf.core.dllog import read_log
from ncf.models.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
PIN = json.loads((Path(__file__).with_name("run_pin.json")).read_text())


def pinned(metrics: dict) -> dict:
    """The model figures of a run's metrics.json that the pin holds (not its clocks or host)."""
    keys = next(iter(PIN["lanes"].values()))
    return {k: metrics.get(k) for k in keys}


@pytest.mark.slow
@pytest.mark.triton
def test_ncf_run_end_to_end(tmp_path):
    runs = tmp_path / "runs"
    cmd = [
        sys.executable, "-m", "ncf.cli", "run",
        "--input", str(ROOT / "data/ml-latest-small/ratings.csv"),
        "--runs", str(runs), "--etl-dir", str(tmp_path / "etl"), "--repo", str(tmp_path / "repo"),
        "--seed", "1", "--bench-seconds", "0.3",
    ]  # fmt: skip
    # a guard against a hang, not a speed check: about 6 min on the 2-core machine, twice that
    # when its cores are slow
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir,) = runs.iterdir()
    for rel in (
        "report.md",
        "metrics.json",
        "train/log.json",
        "train/learning_curve.png",
        "bench/triton.json",
        "bench/triton.png",
        "evaluation.json",
        "evaluation-mf.json",
        "train-mf/best.pt",
    ):
        assert (run_dir / rel).is_file(), rel
    m = json.loads((run_dir / "metrics.json").read_text())
    # Exactly the figures of a pinned run (floats compared bit for bit): one per lane and CPU.
    assert pinned(m) in list(PIN["lanes"].values()), (
        f"no pinned run matches on {machine_info()['cpu']}: {json.dumps(pinned(m))}"
    )
    assert 0.0 < m["itempop_hr@10"] < 1.0
    assert m["train_samples_per_s"] > 0 and m["served_samples_per_s"] > 0 and m["served_p99_ms"] > 0
    assert [s["stage"] for s in m["stages"]] == [
        "etl",
        "train",
        "train-mf",
        "evaluate",
        "evaluate-mf",
        "export",
        "serve+bench",
    ]
    rows = {r["ranking"]: r for r in m["accuracy"]}
    assert list(rows) == ["ItemPop", "MF", "NeuMF"]
    for row in rows.values():  # ~9.7k candidates instead of 101: far lower figures
        assert row["full_hr@10"] < row["hr@10"] and 0.0 < row["full_mrr"] < row["hr@10"]
    bench = json.loads((run_dir / "bench/triton.json").read_text())
    assert {r["model"] for r in bench["rows"]} == {"neumf", "ncf", "recommend"}
    assert all(r["errors"] == 0 for r in bench["rows"])
    epochs = [
        r
        for r in read_log(run_dir / "train/log.json")
        if r["type"] == "LOG" and r["step"] not in ("PARAMETER", [])
    ]
    # `ncf run` holds out valid and test: epochs are evaluated on validation only, until the
    # preset's patience has passed without a better one (or its last epoch).
    small = PRESETS["small"]
    assert len(epochs) == min(small["epochs"], m["best_epoch"] + 1 + small["patience"])
    assert all("valid_hr@10" in r["data"] for r in epochs)
    assert m["protocol"] == "valid-selected"
    out = proc.stdout
    for needle in ("HR@10", "NDCG@10", "samples/s", "p99"):
        assert needle in out
    report = (run_dir / "report.md").read_text()
    assert "ItemPop" in report and "learning_curve.png" in report
    assert "Protocol: valid-selected" in report
    # the metric suite and the paired NeuMF - MF test over the users of per_user.parquet
    per_user = pd.read_parquet(run_dir / "per_user.parquet")
    assert len(per_user) == m["users"] and "neumf_full_rank" in per_user.columns
    for ranking in ("sampled", "full"):
        test = m["neumf_vs_mf"][ranking]["hr@10"]
        assert test["users"] == m["users"] and 0 < test["p"] <= 1 and test["lo"] <= test["hi"]
    assert m["suite"]["neumf"]["full"]["model"]["coverage@10"] > 0
    assert "NeuMF - MF, per user" in report and "| full | MF |" in report


def test_ncf_run_stops_at_the_failing_stage_with_its_command(tmp_path):
    bad = tmp_path / "ratings.csv"
    bad.write_text("userId,movieId,rating,timestamp\n1,2,9.5,100\n")
    cmd = [sys.executable, "-m", "ncf.cli", "run", "--input", str(bad), "--runs", str(tmp_path / "runs"),
           "--etl-dir", str(tmp_path / "etl"), "--repo", str(tmp_path / "repo")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "rating" in proc.stderr and "stage 'etl' failed" in proc.stderr
    assert not (tmp_path / "etl").exists() and not (tmp_path / "repo").exists()
    (run_dir,) = (tmp_path / "runs").iterdir()
    stages = json.loads((run_dir / "stages.json").read_text())
    assert [s["stage"] for s in stages] == ["etl"] and stages[0]["rc"] != 0
