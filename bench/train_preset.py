"""What a preset reaches: several seeds on one ETL split, the model vs MF and ItemPop.

Each seed is a real ``ncf train`` subprocess (as ``ncf run`` starts it) of the preset, and of the
baseline preset (MF) when one is given; the table has one row per seed plus their mean and range,
written as ``bench/results/<name>.json`` / ``.md``. With a validation split the epoch is chosen on
it and ``hr@10`` is the test split's at that epoch (``protocol`` says which).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ncf.bench.entry import BenchError, Results
from ncf.core import textfile
from ncf.models.data import load_etl
from ncf.models.metrics import metric_suite
from ncf.models.significance import paired_bootstrap

COLUMNS = (
    "seed",
    "protocol",
    "valid_hr@10",
    "hr@10",
    "ndcg@10",
    "best_epoch",
    "mf_valid_hr@10",
    "mf_hr@10",
    "mf_ndcg@10",
    "mf_best_epoch",
    "recbole_hr@10",
    "recbole_best_epoch",
    "itempop_hr@10",
    "itempop_ndcg@10",
    "train_s",
    "wall_s",
    "samples_per_s",
)
AVERAGED = ("valid_hr@10", "hr@10", "ndcg@10", "mf_valid_hr@10", "mf_hr@10", "mf_ndcg@10",
            "recbole_hr@10", "train_s", "wall_s")  # fmt: skip


def train(etl: Path, preset: str, seed: int, out: Path, extra: list[str]) -> tuple[dict, float]:
    """One ``ncf train`` run; its metrics.json and wall seconds."""
    cmd = [sys.executable, "-m", "ncf.cli", "train", "--data", str(etl), "--out", str(out)]
    cmd += ["--preset", preset, "--seed", str(seed), "--no-progress", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise BenchError(f"{shlex.join(cmd)} failed (exit {proc.returncode}; stderr above)")
    return textfile.read_json(out / "metrics.json"), wall


def test_hits(etl: Path, run: Path) -> np.ndarray:
    """Per test user HR@10 of ``run/best.pt`` (``ncf evaluate --suite --per-user``), user order."""
    per_user = run / "per_user.parquet"
    cmd = [sys.executable, "-m", "ncf.cli", "evaluate", "--data", str(etl), "--checkpoint",
           str(run / "best.pt"), "--suite", "--per-user", str(per_user), "--out", str(run / "ev.json")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise BenchError(f"{shlex.join(cmd)} failed (exit {proc.returncode}; stderr above)")
    frame = pd.read_parquet(per_user)
    counts = (torch.from_numpy(frame[c].to_numpy(np.int64)) for c in ("greater", "ties"))
    return metric_suite(*counts, ks=(10,))["hr@10"].numpy()


def peer_runs(name: str, results_dir: Path, etl: Path, seeds: list[int]) -> dict[int, dict]:
    """The NeuMF runs of ``ncf bench peers`` results ``name`` on ``etl``, by seed (each seed)."""
    path = results_dir / f"{name}.json"
    doc = textfile.read_json(path)
    if Path(doc.get("etl", "")).resolve() != etl.resolve():
        raise BenchError(f"{path}: RecBole ran on {doc.get('etl')}, not {etl}; "
                         f"run `ncf bench peers --etl {etl} --seeds {' '.join(map(str, seeds))}`")  # fmt: skip
    runs = {r["seed"]: r for r in doc["runs"] if r["model"] == "NeuMF" and "ours_test_hits" in r}
    missing = sorted(set(seeds) - set(runs))
    if missing:
        raise BenchError(f"{path}: no NeuMF run with per-user hits for seeds {missing}; run "
                         f"`ncf bench peers --etl {etl} --models NeuMF --seeds {' '.join(map(str, seeds))}`")  # fmt: skip
    return {s: {**runs[s], "test_users": doc["test_users"]} for s in seeds}


def one_seed(etl: Path, preset: str, baseline: str | None, seed: int, out: Path,
             extra: list[str], peer: dict | None = None) -> dict:  # fmt: skip
    """Train one seed of ``preset`` (and of ``baseline``); its row."""
    m, wall = train(etl, preset, seed, out / preset, extra)
    row = {
        "seed": seed,
        "protocol": m.get("protocol"),
        "valid_hr@10": m.get("valid", {}).get("hr@10"),
        "hr@10": m["hr@10"],
        "ndcg@10": m["ndcg@10"],
        "best_epoch": m["best_epoch"],
        "itempop_hr@10": m["itempop_hr@10"],
        "itempop_ndcg@10": m["itempop_ndcg@10"],
        "train_s": round(m["time_to_train"], 1),
        "wall_s": round(wall, 1),
        "samples_per_s": round(m["mean_train_throughput"]),
    }
    if peer is not None:
        row["hits"] = test_hits(etl, out / preset)
        row.update(
            {"recbole_hr@10": peer["ours"]["test_hr10"], "recbole_best_epoch": peer["best_epoch"]}
        )
    if baseline:
        b, _ = train(etl, baseline, seed, out / baseline, extra)
        row.update({"mf_valid_hr@10": b.get("valid", {}).get("hr@10"), "mf_hr@10": b["hr@10"],
                    "mf_ndcg@10": b["ndcg@10"], "mf_best_epoch": b["best_epoch"]})  # fmt: skip
    return row


def summarize(rows: list[dict]) -> dict:
    """Mean, min and max over the seeds of every averaged column the rows have."""
    summary = {}
    for key in AVERAGED:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            summary[key] = {
                "mean": sum(values) / len(values),
                "min": min(values),
                "max": max(values),
            }
    return summary


def check_preset(
    etl: Path,
    preset: str,
    seeds: list[int],
    name: str,
    results_dir: Path,
    extra: list[str] | None = None,
    baseline: str | None = None,
    peers: str = "",
) -> Results:
    """Run every seed; their rows, a mean row and a min-max row (``ncf.bench.entry`` writes them).
    With ``peers`` (a ``ncf bench peers`` results name on the same ETL), RecBole's NeuMF of each
    seed beside ours, and a paired bootstrap over the test users of the per-user HR@10 averaged
    over the seeds: ours minus RecBole's."""
    peer = peer_runs(peers, results_dir, etl, seeds) if peers else {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_seed(etl, preset, baseline, s, Path(tmp) / f"seed{s}", extra or [], peer.get(s))
                for s in seeds]  # fmt: skip
    versus = {}
    if peer:
        users = load_etl(etl).test_users.numpy().tolist()
        if users != peer[seeds[0]]["test_users"]:
            raise BenchError(f"{peers}: its test users are not those of {etl}")
        ours = np.mean([r.pop("hits") for r in rows], axis=0)
        theirs = np.mean([np.asarray(peer[s]["ours_test_hits"]) for s in seeds], axis=0)
        versus = {"recbole": peers, "metric": "test hr@10, per user, mean over the seeds",
                  **paired_bootstrap(ours, theirs)}  # fmt: skip
        print(f"ours - RecBole: HR@10 {versus['diff']:+.4f} [{versus['lo']:+.4f}, "
              f"{versus['hi']:+.4f}] p={versus['p']:.3g}", file=sys.stderr)  # fmt: skip
    summary = summarize(rows)
    mean_row = {
        "seed": "mean",
        **{k: v["mean"] for k, v in summary.items()},
        "itempop_hr@10": rows[0]["itempop_hr@10"],
        "itempop_ndcg@10": rows[0]["itempop_ndcg@10"],
    }
    range_row = {
        "seed": "range",
        **{k: f"{v['min']:.4g}-{v['max']:.4g}" for k, v in summary.items()},
    }
    about = f"ncf train --preset {preset}" + (f" vs --preset {baseline}" if baseline else "")
    return Results(
        name,
        [*rows, mean_row, range_row],
        COLUMNS,
        f"{about} on {etl.name}",
        results_dir,
        extra={
            "etl_dir": str(etl),
            "preset": preset,
            "baseline": baseline,
            "summary": summary,
            "versus_recbole": versus,
        },  # fmt: skip
    )
