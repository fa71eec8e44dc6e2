"""The ETL's cost against the number of ratings: 20M to 200M synthetic ratings on this machine.

For each ``ncf synth --scale S --format parquet`` data set (scale 1.0 = 20M ratings, made once
under ``--data`` and kept; not timed), ``ncf etl --holdout test`` runs partitioned on
``--workers`` Dask workers (``--partition-rows``, at least 2 partitions) and, up to
``--in-memory-up-to``, in memory in one process. Each run is a fresh subprocess
(``ncf.bench.etl.measure``): wall time, ratings/s and peak RSS, summed over the processes and of
the largest one (what one worker or machine must hold).

    python -m ncf.bench.etl_scale                      # 20M, 50M, 100M, 200M
    python -m ncf.bench.etl_scale --scales 0.05,0.1    # a quick look

Targets (issue #20): 200M ratings complete with at most 8 GB per process, and the partitioned
path's time per rating at 200M within 1.5x of its own at 20M.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Plot, Results
from ncf.bench.etl import Child, measure, warm_page_cache
from ncf.core.config import Config, flag, setting
from ncf.workflows.etl import PARTITION_ROWS, EtlConfig

ML20M = 20_000_263  # ratings of `ncf synth --scale 1.0` (ML-20m's count)
PROCESS_GB_TARGET = 8.0
SCALING_TARGET = 1.5


@dataclass
class EtlScaleBench(Config):
    """ETL wall time and peak RSS per process against the number of ratings."""

    scales: str = setting("1,2.5,5,10", help="comma-separated `ncf synth` scales (1.0 = 20M)")
    workers: int = setting(2, help="Dask workers of the partitioned runs")
    partition_rows: int = setting(
        PARTITION_ROWS, help="`ncf etl --partition-rows` of the partitioned runs"
    )
    in_memory_up_to: float = setting(
        5.0, help="largest scale also run in memory in one process (0: none)"
    )
    data: Path = setting(
        Path("data/synth/etl-scale"), help="where the parquet data sets are made (kept)"
    )
    engine: str = setting("nvtabular", help="ETL engine")
    eval_negatives: int = setting(EtlConfig.eval_negatives, help="evaluation negatives per user")
    work: Path = setting(Path("work/bench-etl-scale"), help="ETL outputs (deleted after each run)")
    keep: bool = flag(False, help="keep the ETL outputs")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        try:
            values = [float(s) for s in self.scales.split(",")]
        except ValueError:
            values = []
        if not values or min(values) <= 0:
            raise ValueError(f"--scales {self.scales!r}: use positive numbers like 1,2.5,5,10")
        if self.workers < 1 or self.partition_rows < 1:
            raise ValueError("--workers and --partition-rows must be >= 1")


CONFIG = EtlScaleBench


def data_set(args: EtlScaleBench, scale: float) -> Path:
    """The parquet folder of ``ncf synth --scale scale`` (made on first use)."""
    out = args.data / f"scale{scale:g}.parquet"  # `ncf synth`: a .parquet --out is the folder
    if not out.is_dir():
        cmd = [sys.executable, "-m", "ncf.cli", "synth", "--scale", f"{scale:g}"]
        subprocess.run([*cmd, "--format", "parquet", "--out", str(out)], check=True)
    return out


def run(args: EtlScaleBench) -> Results:
    """Every scale, partitioned (and in memory where asked); the rows of ``etl-scale.json``."""
    rows = []
    for scale in (float(s) for s in args.scales.split(",")):
        data = data_set(args, scale)
        warm_page_cache(data)
        ratings = round(scale * ML20M)
        partitions = max(2, math.ceil(ratings / args.partition_rows))
        runs = [(args.workers, partitions)]
        if scale <= args.in_memory_up_to:
            runs.append((1, 1))
        for workers, parts in runs:
            child = Child(
                "etl", data, args.work / f"s{scale:g}-p{parts}", workers, parts, args.engine,
                args.eval_negatives,
            )  # fmt: skip
            record = measure(child)
            rows.append(_row(record, scale, workers, parts))
            if not args.keep:
                shutil.rmtree(child.out, ignore_errors=True)
    columns = [
        "config", "ratings_m", "partitions", "total_s", "s_per_m", "ratings_per_s",
        "process_rss_gb", "peak_rss_gb",
    ]  # fmt: skip
    title = "ETL cost against ratings (`ncf etl --holdout test`, synthetic ML-20m-like parquet)"
    plot = Plot(x="ratings_m", y="total_s", series=("config",), title=title, y2="process_rss_gb")
    return Results("etl-scale", rows, columns, title, args.results_dir, _verdict(rows), plot)


def _row(record: dict[str, Any], scale: float, workers: int, partitions: int) -> dict[str, Any]:
    ratings = int(record["meta"]["input"]["rows"])
    where = "in memory, 1 process" if partitions == 1 else f"partitioned, {workers} workers"
    return {
        "config": where,
        "scale": scale,
        "ratings_m": round(ratings / 1e6, 1),
        "workers": workers,
        "partitions": partitions,
        "total_s": record["total_s"],
        "s_per_m": round(record["total_s"] / (ratings / 1e6), 3),
        "ratings_per_s": round(ratings / record["total_s"]),
        "process_rss_gb": record["process_rss_gb"],
        "peak_rss_gb": record["peak_rss_gb"],
        "stages": record["stages"],
    }


def _verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets, measured: peak RSS per process at the largest scale, and time per rating
    there against the smallest scale (partitioned runs)."""
    part = sorted((r for r in rows if r["partitions"] > 1), key=lambda r: r["ratings_m"])
    if not part:
        return {}
    small, large = part[0], part[-1]
    ratio = large["s_per_m"] / small["s_per_m"]
    return {
        "largest": {"ratings_m": large["ratings_m"], "process_rss_gb": large["process_rss_gb"]},
        "process_rss_within_target": large["process_rss_gb"] <= PROCESS_GB_TARGET,
        "time_per_rating_ratio": round(ratio, 3),
        "time_per_rating_within_target": ratio <= SCALING_TARGET,
        "targets": {"process_rss_gb": PROCESS_GB_TARGET, "time_per_rating_ratio": SCALING_TARGET},
    }


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
