"""ETL benchmark: wall time and peak RSS per stage of ``ncf etl`` on 20M synthetic ML-20m ratings,
beside DLE's ``convert.py`` measured in the same run.

Each configuration runs in a fresh subprocess (:func:`measure`), so that one run's allocator caches
do not inflate the next one's RSS; peak RSS is sampled over the process and its Dask workers, as
the sum (``peak_rss_gb``) and per process (``process_rss_gb``: what must fit one machine or
worker). Configurations: the in-memory path (the one ``ncf etl`` chooses for 20M ratings) in one
process and with the fit on Dask workers; the partitioned path on Dask workers (two partitions);
and DLE's convert.py (``bench/etl_dle.py``) on the same file.

    ncf synth --scale 1.0 --out data/synth/ml20m/ratings.csv
    python -m ncf.bench.etl            # or: ncf bench etl

``python -m ncf.bench.etl_scale`` measures the cost against the number of ratings (20M to 200M).
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
STAGES = ("read", "prepare", "fit", "transform", "finish", "write")
DLE = "DLE convert.py"
GB = 1e9


@dataclass
class EtlBench(Config):
    """ETL wall time and peak RSS per stage, beside DLE's convert.py in the same run."""

    input: Path = setting(
        DEFAULT_INPUT, help="ratings.csv to process (from `ncf synth --scale 1.0`)"
    )
    workers: str = setting("1,2", help="in memory: comma-separated worker counts, one run each")
    partitioned: str = setting(
        "2", help="partitioned (2 partitions): comma-separated worker counts ('' for none)"
    )
    dle: bool = flag(True, help="also run DLE's convert.py (bench/etl_dle.py) on --input")
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
    # set by ``measure`` for the process that runs one configuration: that run's config file
    child: Path | None = setting(None, help=argparse.SUPPRESS)

    def check(self) -> None:
        for name in ("workers", "partitioned"):
            counts = [c for c in getattr(self, name).split(",") if c.strip()]
            if not all(c.strip().isdigit() and int(c) >= 1 for c in counts):
                raise ValueError(f"--{name} {getattr(self, name)!r}: use counts >= 1 like 1,2")


@dataclass
class Child(Config):
    """One measured run (the parent's subprocess): our ETL or DLE's convert.py."""

    mode: Literal["etl", "dle"] = setting("etl", help="what to run")
    input: Path = setting(DEFAULT_INPUT, help="input ratings")
    out: Path = setting(Path("work/bench-etl/out"), help="output directory")
    workers: int = setting(1, help="Dask workers")
    partitions: int = setting(1, help="partitions (1: in memory)")
    engine: str = setting("nvtabular", help="ETL engine")
    eval_negatives: int = setting(100, help="negatives per user")
    record: Path = setting(Path("record.json"), help="where the measurement goes")


CONFIG = EtlBench


def run(args: EtlBench) -> Results | int:
    """Run every configuration in a subprocess; the rows of ``etl.json`` / ``etl.md``."""
    if args.child is not None:
        doc = textfile.read_json(args.child)
        return _child(Child.from_dict(doc["config"], str(args.child)))
    if not args.input.is_file():
        raise FileNotFoundError(
            f"{args.input} not found: make it with `ncf synth --scale 1.0 --out {args.input}`"
        )
    warm_page_cache(args.input)
    runs = [(int(w), 1) for w in args.workers.split(",") if w.strip()]
    runs += [(int(w), 2) for w in args.partitioned.split(",") if w.strip()]
    rows, meta = [], {}
    for workers, partitions in runs:
        child = Child(
            "etl", args.input, args.work / f"w{workers}-p{partitions}", workers, partitions
        )
        record = measure(child.replace(engine=args.engine, eval_negatives=args.eval_negatives))
        meta = record.get("meta", meta)
        rows.append(stage_row(record, config_name(workers, partitions)))
        if not args.keep:
            shutil.rmtree(child.out, ignore_errors=True)
    if args.dle:
        dle = Child("dle", args.input, args.work / "dle", eval_negatives=args.eval_negatives)
        rows.append(stage_row(measure(dle), DLE))
        shutil.rmtree(dle.out, ignore_errors=True)
        for row in rows[:-1]:
            row["vs_dle"] = f"{row['total_s'] / rows[-1]['total_s']:.2f}x time, " + (
                f"{row['peak_rss_gb'] / rows[-1]['peak_rss_gb']:.2f}x memory"
            )
    columns = ["config", *STAGES, "total_s", "peak_rss_gb", "process_rss_gb", "vs_dle"]
    extra = {
        "input": meta.get("input"),
        "etl_counts": {
            k: meta.get(k)
            for k in ("n_users", "n_items", "train_rows", "test_rows", "negative_rows", "dropped")
        },
        "dle_stages": rows[-1].get("stages") if args.dle else None,
        "engine": args.engine,
        "negatives": args.eval_negatives,
    }
    title = "ETL: `ncf etl` on 20M synthetic ML-20m ratings (seconds / peak GB per stage)"
    return Results("etl", rows, columns, title, args.results_dir, extra)


def config_name(workers: int, partitions: int) -> str:
    """The row label of a configuration of ours."""
    where = "1 process" if workers == 1 else f"{workers} Dask workers"
    return f"{where}, in memory" if partitions == 1 else f"{where}, {partitions} partitions"


def warm_page_cache(path: Path) -> None:
    """Read ``path`` (a file, or a folder's files) once so that no run pays the first disk read."""
    for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if f.is_file():
            with open(f, "rb") as handle:
                while handle.read(64 << 20):
                    pass


def measure(child: Child) -> dict[str, Any]:
    """Run ``child`` in a fresh process; its record (seconds, stages, peak RSS, ETL metadata)."""
    with tempfile.TemporaryDirectory() as tmp:
        one = child.replace(record=Path(tmp) / "record.json")
        config = write_config(Path(tmp) / "config.json", one, "bench etl child")
        cmd = [sys.executable, "-m", "ncf.bench.etl", "--child", str(config)]  # see run()
        subprocess.run(cmd, check=True)
        return textfile.read_json(one.record)


def _child(cfg: Child) -> int:
    """One configuration in this process: time every stage, sample peak RSS."""
    stages: dict[str, Any] = {}
    t0 = time.perf_counter()
    with PeakRSS() as total:
        if cfg.mode == "dle":
            from ncf.bench.etl_dle import convert

            seconds = convert(cfg.input, cfg.out, cfg.eval_negatives)
            stages = {name: {"seconds": s} for name, s in seconds.items()}
            meta = {}
        else:
            from ncf.workflows.etl import run_etl

            opts = EtlConfig(
                input=cfg.input,
                out=cfg.out,
                eval_negatives=cfg.eval_negatives,
                workers=cfg.workers,
                partitions=cfg.partitions,
                engine=cfg.engine,
                force=True,
                holdout="test",  # DLE's split, as convert.py makes it
            )
            meta = run_etl(opts, stage=lambda name: stage(stages, name))
    record = {
        "stages": stages,
        "total_s": round(time.perf_counter() - t0, 3),
        "peak_rss_gb": round(total.peak_bytes / GB, 3),
        "process_rss_gb": round(total.process_peak_bytes / GB, 3),
        "meta": meta,
    }
    cfg.record.write_text(json.dumps(record))
    return 0


def stage_row(record: dict[str, Any], name: str) -> dict[str, Any]:
    """A table row: ``seconds / GB`` per stage, totals, and the raw figures."""
    row: dict[str, Any] = {"config": name, "stages": record["stages"]}
    for key, s in record["stages"].items():
        gb = s.get("peak_rss_gib", 0) * 2**30 / GB
        row[key] = f"{s['seconds']:.1f} s" + (f" / {gb:.2f}" if gb else "")
    for key in ("total_s", "peak_rss_gb", "process_rss_gb"):
        row[key] = record[key]
    return row


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
