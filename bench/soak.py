"""``ncf bench soak``: a server under a bounded mixed load (valid and invalid requests).

Starts its own tritonserver on loopback, runs ``ncf.serving.load.run_load`` (by default 60 s at
concurrency 16, a quarter of the requests invalid: unknown ids, wrong dtypes, oversized batches)
and records: failed valid requests (must be 0), invalid requests accepted (must be 0), server RSS
after warm-up vs at the end (within 10%), and whether the server still answers afterwards.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.core.config import DEFAULT_SEED, Config, setting
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


@dataclass
class SoakBench(Config):
    """A tritonserver under a bounded load of valid and invalid requests."""

    repo: Path = setting(Path("triton_repo"), help="exported repository")
    duration: float = setting(60.0, help="seconds of load")
    concurrency: int = setting(16, help="client threads")
    invalid_fraction: float = setting(0.25, help="share of invalid requests")
    seed: int = setting(DEFAULT_SEED, help="seed of the request mix")
    name: str = setting("soak", help="results name (<results-dir>/<name>.json)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        if self.duration <= 0 or self.concurrency < 1 or not 0.0 <= self.invalid_fraction < 1.0:
            raise ValueError(
                f"--duration {self.duration}, --concurrency {self.concurrency}, "
                f"--invalid-fraction {self.invalid_fraction}: need duration > 0, "
                "concurrency >= 1, 0 <= fraction < 1"
            )


CONFIG = SoakBench


def run(args: SoakBench) -> Results:
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
