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


def matches_unpinned_cpu(got: dict, cpu: str) -> None:
    """On a CPU the pin has no set for (its kernels round differently): what every CPU trains the
    same (ItemPop exactly, MF to 1e-6, the data's shape exactly) and NeuMF's HR@10 in the band."""
    ref = next(iter(PIN["lanes"].values()))
    hint = f"pin this CPU ({cpu}) in run_pin.json: {json.dumps(got)}"
    for key in ("itempop_hr@10", "itempop_ndcg@10", "negatives_per_user", "protocol", "preset",
                "users", "items", "train_rows", "full_candidates_per_user"):  # fmt: skip
        assert got[key] == ref[key], f"{key}: {got[key]} != {ref[key]}; {hint}"
    rows = {r["ranking"]: r for r in got["accuracy"]}
    refs = {r["ranking"]: r for r in ref["accuracy"]}
    assert rows["ItemPop"] == refs["ItemPop"], hint
    for key, value in refs["MF"].items():
        same = (
            value == pytest.approx(rows["MF"][key], rel=1e-6)
            if isinstance(value, float)
            else (value == rows["MF"][key])
        )
        assert same, f"MF {key}: {rows['MF'][key]} != {value}; {hint}"
    lo, hi = PIN["neumf_hr10_band"]
    assert lo <= got["hr@10"] == rows["NeuMF"]["hr@10"] <= hi, hint
    print(hint)


@pytest.mark.parametrize("lane", list(PIN["lanes"]))
def test_a_pinned_set_passes_the_unpinned_cpu_check(lane):
    matches_unpinned_cpu(PIN["lanes"][lane], "a CPU with no pinned set")


def test_the_unpinned_cpu_check_refuses_other_figures():
    ref = next(iter(PIN["lanes"].values()))
    moved_mf = json.loads(json.dumps(ref))
    next(r for r in moved_mf["accuracy"] if r["ranking"] == "MF")["hr@10"] += 1e-3
    low_neumf = {**ref, "hr@10": PIN["neumf_hr10_band"][0] - 0.01}
    for bad in (moved_mf, low_neumf, {**ref, "train_rows": ref["train_rows"] - 1}):
        with pytest.raises(AssertionError):
            matches_unpinned_cpu(bad, "a CPU with no pinned set")


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
    cpu = machine_info()["cpu"]
    if any(key.endswith(f" on {cpu}") for key in PIN["lanes"]):
        # Exactly the figures of a pinned run (floats compared bit for bit): one per lane and CPU.
        assert pinned(m) in list(PIN["lanes"].values()), (
            f"no pinned run matches on {cpu}: {json.dumps(pinned(m))}"
        )
    else:
        matches_unpinned_cpu(pinned(m), cpu)
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
    # preset's patience has passed without a better one, not before its min_epochs (or its last).
    small = PRESETS["small"]
    patient = max(small["min_epochs"], m["best_epoch"] + 1 + small["patience"])
    assert len(epochs) == min(small["epochs"], patient)
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
