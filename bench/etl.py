"""ETL benchmark: wall time and peak RSS per stage of ``ncf etl`` on full-scale synthetic ML-20m.

Each configuration (1 process; N Dask workers) runs in a fresh subprocess, so that one run's
allocator caches do not inflate the next one's RSS; peak RSS includes Dask worker processes.
The reference row is NVIDIA DeepLearningExamples' ``convert.py`` on the same 20M rows on this
2-core machine (about 78 s, 4.3 GB: docs/FACTS.md; its negatives are not guaranteed distinct).

    ncf synth --scale 1.0 --out data/synth/ml20m/ratings.csv
    python -m ncf.bench.etl            # or: ncf bench etl
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR, PeakRSS, stage
from ncf.bench.entry import Results
from ncf.core import textfile
from ncf.core.config import Config, flag, setting, write_config
from ncf.workflows.etl import EtlConfig

DEFAULT_INPUT = Path("data/synth/ml20m/ratings.csv")
STAGES = ("read", "filter", "fit", "transform", "split", "negatives", "write")
GB = 1e9  # the reference is reported in GB
REFERENCE = {
    "config": "DLE convert.py (reference, docs/FACTS.md)",
    "total_s": 78.0,
    "peak_rss_gb": 4.3,
}
TARGET = {"total_s": REFERENCE["total_s"] / 2, "peak_rss_gb": REFERENCE["peak_rss_gb"] * 3 / 4}


@dataclass
class EtlBench(Config):
    """ETL wall time and peak RSS per stage (vs DLE convert.py)."""

    input: Path = setting(
        DEFAULT_INPUT, help="ratings.csv to process (from `ncf synth --scale 1.0`)"
    )
    workers: str = setting("1,2", help="comma-separated worker counts, one run each")
    engine: Literal["nvtabular", "pandas"] = setting("nvtabular", help="ETL engine")
    eval_negatives: int = setting(
        EtlConfig.eval_negatives, help="evaluation negatives per user (`ncf etl`'s default)"
    )
    work: Path = setting(
        Path("work/bench-etl"),
        help="where the ETL outputs go (deleted after each run unless --keep)",
    )
    keep: bool = flag(False, help="keep the ETL outputs")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    # set by the parent for the process that runs one configuration: where its record goes
    child: Path | None = setting(None, help=argparse.SUPPRESS)

    def check(self) -> None:
        counts = self.workers.split(",")
        if not all(c.strip().isdigit() and int(c) >= 1 for c in counts):
            raise ValueError(f"--workers {self.workers!r}: use counts >= 1 like 1,2")


CONFIG = EtlBench


def run(args: EtlBench) -> Results | int:
    """Run every configuration in a subprocess; the rows of ``etl.json`` / ``etl.md``."""
    if args.child is not None:
        return _child(args)
    if not args.input.is_file():
        raise FileNotFoundError(
            f"{args.input} not found: make it with `ncf synth --scale 1.0 --out {args.input}`"
        )
    _warm_page_cache(args.input)
    rows, meta = [], {}
    for workers in (int(w) for w in args.workers.split(",")):
        record, meta = _run_child(args, workers)
        rows.append(_row(record, workers))
    rows.append({**REFERENCE, "vs_reference": "1.00x time, 1.00x memory"})
    columns = ["config", *STAGES, "total_s", "peak_rss_gb", "vs_reference"]
    extra = {
        "input": meta.get("input"),
        "etl_counts": {
            k: meta.get(k)
            for k in ("n_users", "n_items", "train_rows", "test_rows", "negative_rows", "dropped")
        },
        "target": TARGET,
        "engine": args.engine,
        "negatives": args.eval_negatives,
    }
    title = "ETL: `ncf etl` on 20M synthetic ML-20m ratings (seconds / peak GB per stage)"
    return Results("etl", rows, columns, title, args.results_dir, extra)


def _warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def _run_child(args: EtlBench, workers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    out = args.work / f"workers{workers}"
    with tempfile.TemporaryDirectory() as tmp:
        record_path = Path(tmp) / "record.json"
        one = args.replace(child=record_path, workers=str(workers), work=out)
        config = write_config(Path(tmp) / "config.json", one, "bench etl")
        cmd = [sys.executable, "-m", "ncf.bench.etl", "--config", str(config)]
        subprocess.run(cmd, check=True)
        record = textfile.read_json(record_path)
    meta = textfile.read_json(out / "metadata.json")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return record, meta


def _child(args: EtlBench) -> int:
    """One configuration in this process: time every stage, sample peak RSS."""
    from ncf.workflows.etl import EtlConfig, run_etl

    stages: dict[str, Any] = {}
    opts = EtlConfig(
        input=args.input,
        out=args.work,
        eval_negatives=args.eval_negatives,
        workers=int(args.workers),
        engine=args.engine,
        force=True,
        holdout="test",  # DLE's split, as the reference convert.py makes it
    )
    t0 = time.perf_counter()
    with PeakRSS() as total:
        run_etl(opts, stage=lambda name: stage(stages, name))
    record = {
        "stages": stages,
        "total_s": round(time.perf_counter() - t0, 3),
        "peak_rss_gb": round(total.peak_bytes / GB, 3),
    }
    args.child.write_text(json.dumps(record))
    return 0


def _row(record: dict[str, Any], workers: int) -> dict[str, Any]:
    row: dict[str, Any] = {"config": "1 process" if workers == 1 else f"{workers} Dask workers"}
    for name in STAGES:
        s = record["stages"].get(name, {})
        gb = s.get("peak_rss_gib", 0) * 2**30 / GB
        row[name] = f"{s.get('seconds', 0):.1f} s / {gb:.2f}"
        row[f"{name}_s"], row[f"{name}_peak_rss_gb"] = s.get("seconds"), round(gb, 3)
    row["total_s"], row["peak_rss_gb"] = record["total_s"], record["peak_rss_gb"]
    row["vs_reference"] = (
        f"{row['total_s'] / REFERENCE['total_s']:.2f}x time, "
        f"{row['peak_rss_gb'] / REFERENCE['peak_rss_gb']:.2f}x memory"
    )
    return row


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
