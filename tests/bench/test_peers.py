"""bench/peers.py hands RecBole exactly our split: the atomic files are the ETL's train/, valid/ and
test/ pair by pair, the candidates its own negatives; without `make peers` it fails in one line.
The smoke test (one epoch of RecBole's NeuMF) runs only where .venv-peers exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ncf.bench import peers
from ncf.core import names
from ncf.workflows.etl import EtlConfig, run_etl

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
NEGATIVES = 5


@pytest.fixture(scope="module")
def etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `ncf etl --holdout valid,test` of 30 users over 300 items (RecBole draws 100 negatives)."""
    rng = np.random.default_rng(5)
    rows = []
    for u in range(30):
        items = rng.choice(300, size=int(rng.integers(6, 25)), replace=False)
        rows += [(u + 1, 7 * int(i) + 2, 4.0, int(t)) for t, i in enumerate(items)]
    tmp = tmp_path_factory.mktemp("peers")
    csv = tmp / "ratings.csv"
    pd.DataFrame(rows, columns=list(names.RAW_COLUMNS)).to_csv(csv, index=False)
    out = tmp / "etl"
    run_etl(EtlConfig(csv, out, NEGATIVES, 5, engine="pandas", holdout="valid,test"))
    return out


def _parquet_pairs(folder: Path) -> list[tuple[int, int]]:
    table = pq.read_table(folder)
    return list(zip(table[names.USER].to_pylist(), table[names.ITEM].to_pylist(), strict=True))


def _inter_pairs(path: Path) -> tuple[str, list[tuple[int, int]]]:
    header, *lines = path.read_text().splitlines()
    return header, [tuple(int(x) for x in line.split("\t")) for line in lines]


def test_atomic_files_are_our_split(etl: Path, tmp_path: Path) -> None:
    counts = peers.write_atomic(etl, tmp_path, "ds")
    for split in ("train", "valid", "test"):
        header, pairs = _inter_pairs(tmp_path / "ds" / f"ds.{split}.inter")
        assert header == "user_id:token\titem_id:token"
        ours = _parquet_pairs(etl / split)
        assert counts[split] == len(pairs) == len(ours)
        # the same pairs; train/ in the ETL's row order, the held-out splits sorted by user
        key = None if split == "train" else (lambda p: p[0])
        assert pairs == (ours if key is None else sorted(ours, key=key))
    # one held-out item per user in valid and test, never the same one
    _, valid = _inter_pairs(tmp_path / "ds" / "ds.valid.inter")
    _, test = _inter_pairs(tmp_path / "ds" / "ds.test.inter")
    assert [u for u, _ in valid] == [u for u, _ in test] == sorted({u for u, _ in test})
    assert all(v != t for (_, v), (_, t) in zip(valid, test, strict=True))


def test_candidates_are_the_etl_negatives(etl: Path, tmp_path: Path) -> None:
    arrays = np.load(peers.write_candidates(etl, tmp_path / "c.npz"))
    for split, neg_dir in (("valid", "valid_negatives"), ("test", "negatives")):
        users, items = arrays[f"{split}_users"], arrays[f"{split}_items"]
        assert items.shape == (users.size, 1 + NEGATIVES)
        held = dict(_parquet_pairs(etl / split))
        assert items[:, 0].tolist() == [held[u] for u in users.tolist()]
        negs: dict[int, list[int]] = {}
        for u, i in _parquet_pairs(etl / neg_dir):
            negs.setdefault(u, []).append(i)
        assert items[:, 1:].tolist() == [negs[u] for u in users.tolist()]


def test_ours_metrics_use_our_tie_rule(tmp_path: Path) -> None:
    # user 0: held-out item first (hit, NDCG 1); user 1: 11 negatives above it (miss);
    # user 2: an item RecBole did not know (-inf): a miss
    scores = np.zeros((3, 12))
    scores[0, 0], scores[1, 1:] = 1.0, 1.0
    scores[2, 0] = -np.inf
    np.savez(tmp_path / "s.npz", valid_scores=scores, test_scores=scores)
    m = peers.ours_metrics(tmp_path / "s.npz")
    assert m["test_hr10"] == pytest.approx(1 / 3)
    assert m["valid_ndcg10"] == pytest.approx(1 / 3)
    assert m["test_hits"] == [1.0, 0.0, 0.0]  # per test user, for the paired test


def test_a_finished_job_is_reused_and_another_is_not(tmp_path: Path) -> None:
    job = {"model": "NeuMF", "seed": 1, "epochs": 20, "out": str(tmp_path / "NeuMF-seed1.json")}
    job_file = tmp_path / "NeuMF-seed1.job.json"
    job_file.write_text(json.dumps(job))
    assert not peers.reusable(job_file, job)  # started, never finished: no result
    scores = tmp_path / "NeuMF-seed1.scores.npz"
    Path(job["out"]).write_text(json.dumps({"scores_file": str(scores)}))
    assert not peers.reusable(job_file, job)  # its scores are missing
    np.savez(scores, test_scores=np.zeros((1, 2)))
    assert peers.reusable(job_file, job)
    assert not peers.reusable(job_file, {**job, "epochs": 1})  # another job: run again


def test_missing_venv_is_one_line(etl: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "ncf.bench.peers", "--etl", str(etl),
           "--venv", str(tmp_path / "none"), "--results-dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `make peers` first" in lines[0], proc.stderr


def test_etl_flag_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--etl: required"):
        peers.run(peers.PeersBench(venv=tmp_path))


@pytest.mark.skipif(not PEERS_PYTHON.is_file(), reason="no .venv-peers (`make peers`)")
def test_smoke_one_epoch_of_recbole(etl: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "ncf.bench.peers", "--etl", str(etl), "--epochs", "1",
           "--models", "NeuMF", "--venv", str(PEERS_PYTHON.parents[1]),
           "--work", str(tmp_path / "work"), "--results-dir", str(tmp_path / "results")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp_path / "results" / "peers-etl.json").read_text())
    assert out["config"]["epochs"] == 1 and out["atomic_rows"]["test"] == 30
    (run,) = out["runs"]
    assert run["n_users"] == 30 and run["best_epoch"] == 1 and len(run["curve"]) == 1
    assert run["unknown_candidates"] == {"valid": 0, "test": 0}
    assert [r["protocol"] for r in out["rows"]] == [peers.PROTOCOL_RECBOLE, peers.PROTOCOL_OURS]
    for row in out["rows"]:
        assert 0.0 <= row["test_hr10"] <= 1.0 and row["samples_per_s"] > 0
    assert (tmp_path / "results" / "peers-etl.md").read_text().count("| NeuMF |") == 2
