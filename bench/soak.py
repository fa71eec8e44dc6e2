"""``ncf bench soak``: a server under a bounded mixed load (valid and invalid requests).

Starts its own tritonserver on loopback, runs ``ncf.serving.load.run_load`` (by default 60 s at
concurrency 16, a quarter of the requests invalid: unknown ids, wrong dtypes, oversized batches)
and records: failed valid requests (must be 0), invalid requests accepted (must be 0), server RSS
after warm-up vs at the end (within 10%), and whether the server still answers afterwards.

``--abort-every S`` also sends, every S seconds, the request that aborts tritonserver 2.51, to a
server kept up by ``ncf serve``'s supervisor: it records each outage (aborting request to ready
again), the valid requests in flight during one (``lost_in_restart``) and any other valid request
lost (``valid_lost``, must be 0).

``--hog N`` measures instead each model's throughput at batch 1 on a quiet machine and beside N
busy processes (``ncf.bench.hog``; results ``<name>-hog``): none may lose more than half.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry, hog
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.serving.load import LoadStats, run_load
from ncf.serving.server import TritonServer
from ncf.serving.supervisor import RestartPolicy, Supervisor

SUMMARY_COLUMNS = (
    "duration_s",
    "concurrency",
    "requests_per_s",
    *LoadStats.KEYS,
    "aborts",
    "restarts",
    "in_flight_at_abort",
    "sent_while_down",
    "valid_lost",
    "max_outage_s",
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
    row["max_outage_s"] = max(report.get("outage_s") or [0.0])
    return {k: row[k] for k in SUMMARY_COLUMNS}


@dataclass
class SoakBench(Config):
    """A tritonserver under a bounded load of valid and invalid requests."""

    repo: Path = setting(Path("triton_repo"), help="exported repository")
    duration: float = setting(60.0, help="seconds of load")
    concurrency: int = setting(16, help="client threads")
    invalid_fraction: float = setting(0.25, help="share of invalid requests")
    seed: int = setting(DEFAULT_SEED, help="seed of the request mix")
    abort_every: float = setting(
        0.0, help="seconds between requests that abort tritonserver (0: none); needs duration > 60"
    )
    hog: int = setting(
        0,
        help="busy processes beside the server: measure each model's batch-1 "
        "throughput quiet and beside them instead of the mixed load (0: off)",
    )
    hog_seconds: float = setting(10.0, help="seconds measured per model and phase (--hog)")
    hog_concurrency: int = setting(2, help="closed-loop clients per model (--hog)")
    name: str = setting("soak", help="results name (<results-dir>/<name>.json; --hog: <name>-hog)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        if self.duration <= 0 or self.concurrency < 1 or not 0.0 <= self.invalid_fraction < 1.0:
            raise ValueError(
                f"--duration {self.duration}, --concurrency {self.concurrency}, "
                f"--invalid-fraction {self.invalid_fraction}: need duration > 0, "
                "concurrency >= 1, 0 <= fraction < 1"
            )
        if self.abort_every < 0 or 0 < self.abort_every and self.duration <= 60:
            raise ValueError(
                f"--abort-every {self.abort_every} with --duration {self.duration}: need "
                "abort-every >= 0, and duration > 60 s to leave the last restart time to finish"
            )

    def abort_at_s(self) -> tuple[float, ...]:
        """When the aborting requests go: every ``abort_every`` s, the last 60 s before the end."""
        if not self.abort_every:
            return ()
        count = int((self.duration - 60) // self.abort_every)
        return tuple(self.abort_every * (n + 1) for n in range(count))


CONFIG = SoakBench


def results_name(args: SoakBench) -> str:
    """The name of the results this run writes."""
    return f"{args.name}-hog" if args.hog else args.name


HOG_COLUMNS = ("model", "quiet_req_s", "hog_req_s", "kept", "passed")


def run_hog(args: SoakBench) -> Results:
    """Each loaded model's batch-1 throughput, quiet and beside ``args.hog`` busy processes."""
    with TritonServer(args.repo) as server:
        models = [m for m in hog.OUTPUTS if m in server.models]
        rows = hog.measure(
            server.http_url,
            args.repo,
            models,
            args.hog,
            args.hog_seconds,
            args.hog_concurrency,
            args.seed,
        )
    return Results(
        results_name(args),
        rows,
        HOG_COLUMNS,
        f"Batch-1 throughput quiet and beside {args.hog} busy processes ({args.name}-hog)",
        args.results_dir,
        extra={"cpus": len(os.sched_getaffinity(0)), "min_kept": hog.MIN_KEPT},
        exit_code=0 if all(r["passed"] for r in rows) else 1,
    )


def run(args: SoakBench) -> Results:
    if args.hog:
        return run_hog(args)
    options = {"duration_s": args.duration, "concurrency": args.concurrency, "seed": args.seed}
    with TritonServer(args.repo) as server:
        # the serving policy's bound, with the short back-off of the first restart each time
        supervisor = Supervisor(server, RestartPolicy(backoff_s=(1.0,)), log=_log)
        with supervisor.kept_up(0.2):
            report = run_load(
                server.http_url,
                server.grpc_url,
                args.repo,
                lambda: server.pid,
                invalid_fraction=args.invalid_fraction,
                abort_at_s=args.abort_at_s(),
                ready_times=supervisor.ready_at,
                **options,
            )
    return Results(
        args.name,
        [summary_row(report)],
        SUMMARY_COLUMNS,
        "Server under a bounded mixed load"
        + (f", a request that aborts it every {args.abort_every:g} s" if args.abort_every else ""),
        args.results_dir,
        extra={"report": report},
        exit_code=0 if report["passed"] else 1,
    )


def _log(message: str) -> None:
    print(f"ncf bench soak: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
