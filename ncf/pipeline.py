"""``ncf run``: the whole pipeline on one ratings file, each stage as its own ``ncf`` process.

ETL -> train -> evaluate -> export -> tritonserver -> query + benchmark -> stop -> report. Stages
run as subprocesses of the same interpreter so each one logs its resolved configuration, frees its
memory on exit and can be rerun alone with the command printed here.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ncf import names
from ncf.atomic import write_json
from ncf.report import write_report

DEFAULT_INPUT = Path("data/ml-latest-small/ratings.csv")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        type=Path,
        default=DEFAULT_INPUT,
        help="ratings.csv or ratings.dat (default: %(default)s)",
    )
    p.add_argument(
        "--runs",
        type=Path,
        default=Path("runs"),
        help="parent of the run directory (default: %(default)s)",
    )
    p.add_argument(
        "--etl-dir",
        type=Path,
        default=None,
        help="ETL output to (re)use (default: work/etl/<input name>)",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=Path("triton_repo"),
        help="Triton model repository to export into",
    )
    p.add_argument(
        "--preset",
        default="small",
        help="training preset (default: %(default)s; see `ncf train --help`)",
    )
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    p.add_argument(
        "--negatives",
        type=int,
        default=100,
        help="evaluation negatives per user (default: %(default)s)",
    )
    p.add_argument(
        "--min-ratings",
        type=int,
        default=20,
        help="drop users with fewer ratings (default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=1,
        help="seed for ETL negatives and training (default: %(default)s)",
    )
    p.add_argument(
        "--bench-seconds", type=float, default=2.0, help="seconds per Triton benchmark point"
    )
    p.add_argument(
        "--skip-serving", action="store_true", help="stop after export (no tritonserver)"
    )


def _stage(log: list[dict], name: str, argv: list[str]) -> None:
    """Run ``ncf <argv>`` as a subprocess; raise with the command on failure."""
    cmd = [sys.executable, "-m", "ncf.cli", *argv]
    print(f"\n=== {name}: ncf {shlex.join(argv)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, check=False).returncode
    seconds = round(time.perf_counter() - t0, 2)
    log.append({"stage": name, "command": "ncf " + shlex.join(argv), "seconds": seconds, "rc": rc})
    if rc != 0:
        raise RuntimeError(
            f"stage {name!r} failed (exit {rc}); rerun it alone with: ncf {shlex.join(argv)}"
        )


def run(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        raise FileNotFoundError(
            f"{args.input}: no such ratings file (ncf run reads ratings.csv or ratings.dat)"
        )
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = args.runs / stamp
    run_dir.mkdir(parents=True, exist_ok=False)
    etl_dir = args.etl_dir or Path("work/etl") / args.input.parent.name
    train_dir = run_dir / "train"
    bench_dir = run_dir / "bench"
    ckpt = train_dir / "best.pt"
    stages: list[dict] = []
    t0 = time.perf_counter()
    _stage(
        stages,
        "etl",
        [
            "etl",
            "--input",
            str(args.input),
            "--out",
            str(etl_dir),
            "--negatives",
            str(args.negatives),
            "--min-ratings",
            str(args.min_ratings),
            "--seed",
            str(args.seed),
        ],
    )
    train = [
        "train",
        "--data",
        str(etl_dir),
        "--out",
        str(train_dir),
        "--preset",
        args.preset,
        "--seed",
        str(args.seed),
    ]
    if args.epochs is not None:
        train += ["--epochs", str(args.epochs)]
    _stage(stages, "train", train)
    _stage(
        stages,
        "evaluate",
        [
            "evaluate",
            "--data",
            str(etl_dir),
            "--checkpoint",
            str(ckpt),
            "--out",
            str(run_dir / "evaluation.json"),
        ],
    )
    _stage(
        stages,
        "export",
        ["export", "--checkpoint", str(ckpt), "--data", str(etl_dir), "--repo", str(args.repo)],
    )
    if not args.skip_serving:
        _stage(
            stages,
            "serve+bench",
            [
                "bench",
                "triton",
                "--repo",
                str(args.repo),
                "--models",
                names.MODEL_NEUMF,
                names.MODEL_ENSEMBLE,
                names.MODEL_RECOMMEND,
                "--protocols",
                "http",
                "grpc",
                "--batch-sizes",
                "1",
                "1024",
                "--concurrency",
                "1",
                "4",
                "--duration",
                str(args.bench_seconds),
                "--warmup",
                "0.5",
                "--results-dir",
                str(bench_dir),
            ],
        )
    total = round(time.perf_counter() - t0, 1)
    summary = write_report(
        run_dir,
        etl_dir=etl_dir,
        train_dir=train_dir,
        bench_dir=bench_dir,
        stages=stages,
        total_seconds=total,
        input_path=args.input,
    )
    write_json(run_dir / "stages.json", stages)
    print(json.dumps(summary, indent=2), file=sys.stderr)
    _print_summary(summary, run_dir)
    return 0


def _print_summary(s: dict, run_dir: Path) -> None:
    def f(key: str, fmt: str) -> str:
        v = s.get(key)
        return "n/a" if v is None else format(v, fmt)

    print(f"\nrun: {run_dir}  ({s.get('total_seconds')} s)")
    print(
        f"  HR@10 {f('hr@10', '.4f')}  NDCG@10 {f('ndcg@10', '.4f')}  "
        f"(ItemPop HR@10 {f('itempop_hr@10', '.4f')})"
    )
    print(f"  train {f('train_samples_per_s', ',.0f')} samples/s")
    print(
        f"  served ({names.MODEL_NEUMF}, batch {s.get('served_batch', 'n/a')}): "
        f"{f('served_samples_per_s', ',.0f')} samples/s, p99 {f('served_p99_ms', '.2f')} ms"
    )
    print(f"  report: {run_dir / 'report.md'}")
