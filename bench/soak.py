"""``ncf bench soak``: a server under a bounded mixed load (valid and invalid requests).

Starts its own tritonserver on loopback, runs ``serving.load.run_load`` (by default 60 s at
concurrency 16, a quarter of the requests invalid: unknown ids, wrong dtypes, oversized batches)
and records: failed valid requests (must be 0), invalid requests accepted (must be 0), server RSS
after warm-up vs at the end (within 10%), and whether the server still answers afterwards.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bench.common import RESULTS_DIR, write_results
from serving.load import run_load
from serving.server import TritonServer


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


def run(args: argparse.Namespace) -> int:
    if args.duration <= 0 or args.concurrency < 1 or not 0.0 <= args.invalid_fraction < 1.0:
        raise ValueError(
            f"--duration {args.duration}, --concurrency {args.concurrency}, --invalid-fraction "
            f"{args.invalid_fraction}: need duration > 0, concurrency >= 1, 0 <= fraction < 1"
        )
    with TritonServer(args.repo) as server:
        report = run_load(
            server.http_url,
            server.grpc_url,
            args.repo,
            server.pid,
            duration_s=args.duration,
            concurrency=args.concurrency,
            invalid_fraction=args.invalid_fraction,
            seed=args.seed,
        )
    counts = {
        k: report[k]
        for k in (
            "valid_ok",
            "valid_failed",
            "invalid_rejected",
            "invalid_accepted",
            "transport_errors",
        )
        if k in report
    }
    row = {
        "duration_s": report["duration_s"],
        "concurrency": report["concurrency"],
        "requests_per_s": report["requests_per_s"],
        **counts,
        "rss_after_warmup_mb": round(report["rss_after_warmup_bytes"] / 2**20, 1),
        "rss_end_mb": round(report["rss_end_bytes"] / 2**20, 1),
        "rss_ratio": report["rss_ratio"],
        "answers_after": report["answers_after"],
        "passed": report["passed"],
    }
    columns = list(row)
    via_ncf = Path(sys.argv[0]).name == "ncf"
    command = ("ncf " if via_ncf else "python -m bench.soak ") + shlex.join(sys.argv[1:])
    write_results(
        args.name,
        [row],
        columns,
        command.strip(),
        extra={"report": report},
        results_dir=args.results_dir,
        title="Server under a bounded mixed load",
    )
    return 0 if report["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
