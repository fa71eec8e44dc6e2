"""``ncf bench soak``: a server under a bounded mixed load (valid and invalid requests).

Starts its own tritonserver on loopback, runs ``ncf.serving.load.run_load`` (by default 60 s at
concurrency 16, a quarter of the requests invalid: unknown ids, wrong dtypes, oversized batches)
and records: failed valid requests (must be 0), invalid requests accepted (must be 0), server RSS
after warm-up vs at the end (within 10%), and whether the server still answers afterwards.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.serving.load import LoadStats, run_load
from ncf.serving.server import TritonServer

SUMMARY_COLUMNS = (
    "duration_s",
    "concurrency",
    "requests_per_s",
    *LoadStats.KEYS,
    "rss_after_warmup_mb",
    "rss_end_mb",
    "rss_ratio",
    "answers_after",
    "passed",
)


def summary_row(report: dict) -> dict:
    """The table row of a ``run_load`` report (RSS in MiB)."""
    row = {k: report[k] for k in SUMMARY_COLUMNS if k in report}
    row["rss_after_warmup_mb"] = round(report["rss_after_warmup_bytes"] / 2**20, 1)
    row["rss_end_mb"] = round(report["rss_end_bytes"] / 2**20, 1)
    return {k: row[k] for k in SUMMARY_COLUMNS}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, default=Path("triton_repo"), help="exported repository")
    p.add_argument(
        "--duration", type=float, default=60.0, help="seconds of load (default %(default)s)"
    )
    p.add_argument(
        "--concurrency", type=int, default=16, help="client threads (default %(default)s)"
    )
    p.add_argument("--invalid-fraction", type=float, default=0.25, help="share of invalid requests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="soak", help="results name (default %(default)s)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)


def run(args: argparse.Namespace) -> Results:
    if args.duration <= 0 or args.concurrency < 1 or not 0.0 <= args.invalid_fraction < 1.0:
        raise ValueError(
            f"--duration {args.duration}, --concurrency {args.concurrency}, --invalid-fraction "
            f"{args.invalid_fraction}: need duration > 0, concurrency >= 1, 0 <= fraction < 1"
        )
    options = {"duration_s": args.duration, "concurrency": args.concurrency, "seed": args.seed}
    with TritonServer(args.repo) as server:
        report = run_load(
            server.http_url,
            server.grpc_url,
            args.repo,
            server.pid,
            invalid_fraction=args.invalid_fraction,
            **options,
        )
    return Results(
        args.name,
        [summary_row(report)],
        SUMMARY_COLUMNS,
        "Server under a bounded mixed load",
        args.results_dir,
        extra={"report": report},
        exit_code=0 if report["passed"] else 1,
    )


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
