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


@pytest.mark.distributed
def test_two_processes_record_the_bytes_each_rank_all_reduces_and_sends(
    etl_dir: Path, tmp_path: Path
):
    argv = ["--data", str(etl_dir), "--batch-sizes", "512", "--precisions", "fp32", "--procs", "2",
            "--grad-compressions", "fp16", "--shard-embeddings", "--steps", "2",
            "--results-dir", str(tmp_path)]  # fmt: skip
    assert entry.main(bench_train, argv) == 0
    row, sharded = json.loads((tmp_path / "train.json").read_text())["rows"]
    assert (row["procs"], row["grad_compression"], row["shard_embeddings"]) == (2, "fp16", False)
    # fp16: 2 bytes per parameter per step, by the trainer's hook
    assert row["allreduce_mb_per_step"] == round(row["grad_params"] * 2 / 1e6, 3)
    # measured from the sockets: a ring all-reduce of 2 ranks sends 2 (p - 1) / p = 1 x the
    # payload, plus gloo's small message headers
    assert row["allreduce_mb_per_step"] <= row["sent_mb_per_step"]
    assert row["sent_mb_per_step"] <= row["allreduce_mb_per_step"] * 1.01 + 0.001
    # sharded tables: DDP all-reduces the rest only, the all-to-alls send the rows other ranks own
    assert sharded["shard_embeddings"] and sharded["grad_params"] < row["grad_params"]
    assert sharded["allreduce_mb_per_step"] == round(sharded["grad_params"] * 2 / 1e6, 3)
    counted = sharded["allreduce_mb_per_step"] + sharded["alltoall_mb_per_step"]
    assert sharded["alltoall_mb_per_step"] > 0 and row["alltoall_mb_per_step"] == 0
    assert counted <= sharded["sent_mb_per_step"] <= counted * 1.02 + 0.005


@pytest.mark.parametrize("mode", ["tf32", "amp", "bf16"])
def test_dle_gpu_modes_are_refused_on_cpu(etl_dir: Path, mode: str):
    data = load_etl(etl_dir, torch.device("cpu"))
    with pytest.raises(ValueError, match=f"DLE step mode '{mode}'"):
        time_dle_steps(data, 256, 0, 1, torch.device("cpu"), mode)


def test_preset_check_beside_recbole_pairs_the_users(tmp_path: Path):
    """RecBole's runs as `ncf bench peers` records them (here: a miss for every user): its column
    per seed, and the paired bootstrap of ours minus its per-user HR@10 (= our mean HR@10)."""
    from ncf.bench.train_preset import check_preset
    from tests.models.etl_data import planted_ratings
    from tests.models.valid_split import write_valid_etl_dir

    etl = write_valid_etl_dir(planted_ratings(), tmp_path / "etl")
    users = load_etl(etl).test_users.tolist()
    runs = [{"model": "NeuMF", "seed": 1, "best_epoch": 4, "ours": {"test_hr10": 0.0},
             "ours_test_hits": [0.0] * len(users)}]  # fmt: skip
    doc = {"etl": str(etl), "runs": runs, "test_users": users}
    (tmp_path / "peers-x.json").write_text(json.dumps(doc))
    flags = ["--epochs", "1", "--device", "cpu", "--threads", "1", "--eval-batch-size", "4096"]
    res = check_preset(etl, "small", [1], "t", tmp_path, extra=flags, peers="peers-x")
    row = res.rows[0]
    assert (row["recbole_hr@10"], row["recbole_best_epoch"]) == (0.0, 4) and "hits" not in row
    versus = res.extra["versus_recbole"]
    assert versus["diff"] == pytest.approx(row["hr@10"]) and versus["lo"] <= versus["diff"]
    doc["runs"][0]["seed"] = 2
    (tmp_path / "peers-x.json").write_text(json.dumps(doc))
    with pytest.raises(entry.BenchError, match=r"no NeuMF run with per-user hits for seeds \[1\]"):
        check_preset(etl, "small", [1], "t", tmp_path, extra=flags, peers="peers-x")
