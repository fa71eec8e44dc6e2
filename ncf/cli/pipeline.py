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

from ncf.cli.report import write_report
from ncf.core import names
from ncf.core.atomic import write_json

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
        help="ETL output to (re)use (default: work/etl/<input dir name>, plus -valid-test for "
        "--holdout valid,test)",
    )
    p.add_argument(
        "--holdout",
        choices=("valid,test", "test"),
        default="valid,test",
        help="ETL hold-out: valid,test (epoch chosen on validation, test scored once; default) "
        "or test (DLE's best-test-epoch protocol, for comparison with DLE's figures)",
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


def q(path: object) -> str:
    """A path quoted for the shell-style command lines of the run (paths may hold spaces)."""
    return shlex.quote(str(path))


def stage_commands(args: argparse.Namespace, etl_dir: Path, run_dir: Path) -> list[tuple[str, str]]:
    """``(stage, ncf argv as one string)`` for every stage of the run, in order."""
    ckpt = run_dir / "train" / "best.pt"
    epochs = f" --epochs {args.epochs}" if args.epochs is not None else ""
    served = f"{names.MODEL_NEUMF} {names.MODEL_ENSEMBLE} {names.MODEL_RECOMMEND}"
    cmds = [
        ("etl", f"etl --input {q(args.input)} --out {q(etl_dir)} --negatives {args.negatives} "
                f"--min-ratings {args.min_ratings} --seed {args.seed} --holdout {args.holdout}"),
        ("train", f"train --data {q(etl_dir)} --out {q(run_dir / 'train')} --preset {args.preset} "
                  f"--seed {args.seed}{epochs}"),
        ("train-mf", f"train --data {q(etl_dir)} --out {q(run_dir / 'train-mf')} --preset mf-small "
                     f"--seed {args.seed}{epochs}"),
        ("evaluate", f"evaluate --data {q(etl_dir)} --checkpoint {q(ckpt)} --full-ranking "
                     f"--out {q(run_dir / 'evaluation.json')}"),
        ("evaluate-mf", f"evaluate --data {q(etl_dir)} --checkpoint {q(run_dir / 'train-mf' / 'best.pt')} "
                        f"--full-ranking --out {q(run_dir / 'evaluation-mf.json')}"),
        ("export", f"export --checkpoint {q(ckpt)} --data {q(etl_dir)} --repo {q(args.repo)}"),
    ]  # fmt: skip
    if not args.skip_serving:
        cmds.append(("serve+bench", f"bench triton --repo {q(args.repo)} --models {served} "
                     "--protocols http grpc --batch-sizes 1 1024 --concurrency 1 4 "
                     f"--duration {args.bench_seconds} --warmup 0.5 "
                     f"--results-dir {q(run_dir / 'bench')}"))  # fmt: skip
    return cmds


def default_etl_dir(input_path: Path, holdout: str) -> Path:
    """``work/etl/<input dir name>``; ``--holdout valid,test`` outputs get their own directory, so
    an output of the other protocol (or of before --holdout existed) is neither reused nor refused."""
    suffix = "" if holdout == "test" else "-" + holdout.replace(",", "-")
    return Path("work/etl") / f"{input_path.parent.name}{suffix}"


def run(args: argparse.Namespace) -> int:
    if not args.input.is_file():
        raise FileNotFoundError(
            f"{args.input}: no such ratings file (ncf run reads ratings.csv or ratings.dat)"
        )
    run_dir = args.runs / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    etl_dir = args.etl_dir or default_etl_dir(args.input, args.holdout)
    stages: list[dict] = []
    t0 = time.perf_counter()
    try:
        for name, argv in stage_commands(args, etl_dir, run_dir):
            _stage(stages, name, shlex.split(argv))
    except RuntimeError as exc:  # the stage printed its own error; keep the record of the run
        write_json(run_dir / "stages.json", stages)
        print(f"ncf run: {exc} (record: {run_dir / 'stages.json'})", file=sys.stderr)
        return 1
    summary = write_report(
        run_dir,
        etl_dir=etl_dir,
        train_dir=run_dir / "train",
        bench_dir=run_dir / "bench",
        stages=stages,
        total_seconds=round(time.perf_counter() - t0, 1),
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
        f"(ItemPop HR@10 {f('itempop_hr@10', '.4f')}; protocol {s.get('protocol') or 'n/a'})"
    )
    for row in s.get("accuracy", []):  # ItemPop, MF, NeuMF: sampled and full-ranking figures
        cells = "  ".join(f"{k} {'n/a' if row[k] is None else format(row[k], '.4f')}"
                          for k in ("hr@10", "full_hr@10", "full_mrr"))  # fmt: skip
        print(f"  {row['ranking']:8s} {cells}")
    print(f"  train {f('train_samples_per_s', ',.0f')} samples/s")
    print(
        f"  served ({names.MODEL_NEUMF}, batch {s.get('served_batch', 'n/a')}): "
        f"{f('served_samples_per_s', ',.0f')} samples/s, p99 {f('served_p99_ms', '.2f')} ms"
    )
    print(f"  report: {run_dir / 'report.md'}")
