"""``ncf retrain`` end to end (no server): day 2 from a day-1 run folder, each stage a process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ncf.cli.pipeline import STAGE_CONFIGS
from ncf.core.config import write_config
from ncf.models import train
from ncf.models.train import TrainRunConfig
from ncf.serving import repository
from ncf.serving.export import ExportConfig, export_repository
from ncf.workflows.etl import EtlConfig, run_etl

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "data" / "ml-latest-small" / "ratings.csv"
TINY = {"factors": 8, "mlp_layers": [16, 8], "batch_size": 512, "epochs": 2}


@pytest.fixture(scope="module")
def day1_run(tmp_path_factory) -> dict[str, Path]:
    """A day-1 run folder as `ncf run` leaves one (configs/etl, train, export), on 60 users."""
    root = tmp_path_factory.mktemp("retrain")
    ratings = pd.read_csv(SMALL)
    ratings = ratings[ratings.userId <= 60]
    cut = ratings.timestamp.quantile(0.8)
    ratings[ratings.timestamp < cut].to_csv(root / "day1.csv", index=False)
    ratings.to_csv(root / "day2.csv", index=False)
    run = root / "runs" / "day1"
    stages = [
        ("etl", EtlConfig(input=root / "day1.csv", out=root / "etl1", min_ratings=10,
                          eval_negatives=50)),
        ("train", TrainRunConfig.from_preset(
            "small", data=root / "etl1", out=run / "train", device="cpu", threads=1,
            progress=False, hp=TINY)),
        ("export", ExportConfig(checkpoint=run / "train" / "best.pt", data=root / "etl1",
                                repo=root / "repo", check_samples=256)),
    ]  # fmt: skip
    # In this process (each stage as `ncf run` runs it, with the config it records).
    run_etl(stages[0][1])
    train.run(stages[1][1])
    export_repository(**{k: getattr(stages[2][1], k) for k in ("checkpoint", "data", "repo")},
                      check_samples=256)  # fmt: skip
    for stage, cfg in stages:
        write_config(run / STAGE_CONFIGS / f"{stage}.json", cfg, stage)
    return {"root": root, "run": run}


@pytest.mark.slow
def test_day_two_keeps_ids_starts_warm_and_exports_the_next_version(day1_run):
    root, run = day1_run["root"], day1_run["run"]
    cmd = [sys.executable, "-m", "ncf.cli", "retrain", "--previous", str(run),
           "--input", str(root / "day2.csv")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    new = Path(summary["run"])
    assert new.parent == run.parent and new != run  # beside the previous run
    meta = json.loads((new / "etl" / "metadata.json").read_text())
    assert meta["vocab_from"]["path"] == str((root / "etl1").resolve())
    # The previous ETL's settings (not the defaults, 20 and 100).
    assert (meta["min_ratings"], meta["negatives_per_user"]) == (10, 50)
    metrics = json.loads((new / "train" / "metrics.json").read_text())
    assert metrics["epochs_run"] == 1 and metrics["config"]["factors"] == 8
    assert summary["init_from"]["checkpoint"] == str((run / "train" / "best.pt").resolve())
    assert repository.versions(root / "repo" / "neumf") == [1, 2]
    records = json.loads((new / "stages.json").read_text())
    assert [r["stage"] for r in records] == ["etl", "train", "export"]


def test_a_folder_without_stage_configs_is_refused(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ncf.cli", "retrain", "--previous", str(tmp_path), "--input",
         str(SMALL)], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"--previous {tmp_path}: no configs/etl.json" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder was made


def test_a_server_that_does_not_answer_is_refused_before_the_etl(day1_run, tmp_path):
    from ncf.serving.triton_env import free_port

    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = subprocess.run(
        [sys.executable, "-m", "ncf.cli", "retrain", "--previous", str(day1_run["run"]),
         "--input", str(day1_run["root"] / "day2.csv"), "--runs", str(tmp_path),
         "--server-url", url], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"no tritonserver answers at {url}" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder was made
