"""What ``ncf train --preset small`` reaches: several seeds on one ETL split, model vs ItemPop.

Each seed is a real ``ncf train`` subprocess (as ``ncf run`` starts it); the table has one row per
seed plus their mean and range, written as ``bench/results/<name>.json`` / ``.md``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.entry import BenchError, Results

COLUMNS = (
    "seed",
    "hr@10",
    "ndcg@10",
    "best_epoch",
    "itempop_hr@10",
    "itempop_ndcg@10",
    "train_s",
    "wall_s",
    "samples_per_s",
)


def one_seed(etl: Path, preset: str, seed: int, out: Path, extra: list[str]) -> dict:
    """Train one seed with ``ncf train`` and read its metrics.json."""
    cmd = [sys.executable, "-m", "ncf.cli", "train", "--data", str(etl), "--out", str(out)]
    cmd += ["--preset", preset, "--seed", str(seed), "--no-progress", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise BenchError(f"{shlex.join(cmd)} failed (exit {proc.returncode}; stderr above)")
    m = json.loads((out / "metrics.json").read_text())
    return {
        "seed": seed,
        "hr@10": m["hr@10"],
        "ndcg@10": m["ndcg@10"],
        "best_epoch": m["best_epoch"],
        "itempop_hr@10": m["itempop_hr@10"],
        "itempop_ndcg@10": m["itempop_ndcg@10"],
        "train_s": round(m["time_to_train"], 1),
        "wall_s": round(wall, 1),
        "samples_per_s": round(m["mean_train_throughput"]),
    }


def check_preset(
    etl: Path,
    preset: str,
    seeds: list[int],
    name: str,
    results_dir: Path,
    extra: list[str] | None = None,
) -> Results:
    """Run every seed; their rows, a mean row and a min-max row (``bench.entry`` writes them)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_seed(etl, preset, s, Path(tmp) / f"seed{s}", extra or []) for s in seeds]
    summary = {}
    for key in ("hr@10", "ndcg@10", "train_s", "wall_s"):
        values = [r[key] for r in rows]
        summary[key] = {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}
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
    return Results(
        name,
        [*rows, mean_row, range_row],
        COLUMNS,
        f"ncf train --preset {preset} on {etl.name}",
        results_dir,
        extra={"etl_dir": str(etl), "preset": preset, "summary": summary},
    )
