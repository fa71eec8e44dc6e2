"""``ncf bench``: the benchmarks, one subcommand each, and ``all`` (what ``make bench`` runs).

    ncf bench inference | triton | etl | train [options]   # one benchmark (see --help of each)
    ncf bench all [--quick]                                # everything, then the README section
    ncf bench readme                                       # README section from bench/results/

``all`` works on the full-scale synthetic data (``ncf synth --scale 1.0`` into
``data/synth/ml20m/ratings.csv`` if missing), ETLs it, trains briefly when there is no checkpoint,
exports the Triton repository, then runs every benchmark in its own process (so each gets its own
peak RSS) and rewrites the README's results section. ``--quick`` is a small-scale smoke run whose
results go to ``work/bench/quick/results`` (the committed ``bench/results`` stay untouched).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.serving.repository import latest_version

BENCHES: dict[str, tuple[str, str]] = {
    "etl": ("ncf.bench.etl", "ETL wall time and peak RSS per stage (vs DLE convert.py)"),
    "train": ("ncf.bench.train", "training throughput and memory per batch size and precision"),
    "inference": ("ncf.bench.inference", "eager / TorchScript / ONNX Runtime scoring, batch 1..1M"),
    "triton": ("ncf.bench.triton", "tritonserver: neumf, ncf, recommend over HTTP and gRPC"),
    "soak": ("ncf.bench.soak", "tritonserver under a bounded load of valid and invalid requests"),
    "recommend": (
        "ncf.bench.recommend",
        "top-k over the whole catalogue: exact fp32/bf16, two-stage",
    ),
    # a diagnostic, not part of `ncf bench all`
    "profile": ("ncf.bench.profile_step", "torch.profiler table of one training step's operators"),
}


class _ArgvParser(argparse.ArgumentParser):
    """A bench's subparser that keeps the arguments it was given (``args.bench_argv``), so that
    the results record ``ncf bench NAME ARGS`` as the user typed them."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.bench_argv = list(sys.argv[1:] if args is None else args)
        return namespace, extras


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="bench", metavar="BENCH", required=True, parser_class=_ArgvParser
    )
    for name, (module, help_) in BENCHES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError as exc:  # a host without that bench's stack: fail only if it is chosen
            p.set_defaults(import_error=f"{module} cannot be imported here: {exc}")
    p = sub.add_parser("all", help="every benchmark on full-scale synthetic data, then the README")
    add_all_arguments(p)
    p = sub.add_parser("readme", help="rewrite the README results section from bench/results")
    importlib.import_module("ncf.bench.readme").add_arguments(p)


def add_all_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help="small-scale smoke run (scale 0.01, short points) into work/bench/quick",
    )
    p.add_argument(
        "--scale", type=float, default=None, help="synthetic scale (default 1.0; quick 0.01)"
    )
    p.add_argument(
        "--work", type=Path, default=None, help="ETL/run/repo folder (default work/bench)"
    )
    p.add_argument(
        "--results-dir", type=Path, default=None, help="default bench/results (quick: WORK/results)"
    )
    p.add_argument(
        "--readme",
        type=Path,
        default=None,
        help="README to rewrite (default README.md; quick: none)",
    )
    p.add_argument("--skip", nargs="+", default=[], choices=sorted(BENCHES), help="benches to skip")


def run(args: argparse.Namespace) -> int:
    """Run the chosen bench through ``ncf.bench.entry`` (its results record ``ncf bench NAME ...``)."""
    if args.bench == "all":
        return run_all(args)
    if getattr(args, "import_error", None):
        raise RuntimeError(args.import_error)
    module = BENCHES[args.bench][0] if args.bench in BENCHES else "ncf.bench.readme"
    prog = f"ncf bench {args.bench}"
    args.cmdline = entry.command_line(prog, args.bench_argv)
    return entry.execute(importlib.import_module(module), args, prog)


@dataclass
class Plan:
    """Where ``all`` reads and writes, and how big its runs are."""

    quick: bool
    scale: float
    ratings: Path
    work: Path
    results: Path
    readme: Path | None

    @property
    def etl(self) -> Path:
        return self.work / "etl"

    @property
    def checkpoint(self) -> Path:
        return self.work / "train" / "best.pt"

    @property
    def repo(self) -> Path:
        return self.work / "triton_repo"


def plan_from(args: argparse.Namespace) -> Plan:
    """Resolve ``all``'s defaults (quick runs never touch bench/results or the README)."""
    quick = args.quick
    scale = args.scale if args.scale is not None else (0.01 if quick else 1.0)
    if not scale > 0:
        raise ValueError(f"--scale {scale}: must be > 0")
    name = "ml20m" if scale == 1.0 else f"scale{scale:g}"
    work = args.work or (Path("work/bench/quick") if quick else Path("work/bench"))
    results = args.results_dir or (work / "results" if quick else RESULTS_DIR)
    readme = args.readme or (None if quick else Path("README.md"))
    return Plan(quick, scale, Path("data/synth") / name / "ratings.csv", work, results, readme)


def _py(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", *map(str, args)]


def prepare(plan: Plan) -> list[tuple[str, list[str]]]:
    """Commands that make the inputs (data, ETL, checkpoint, Triton repository) still missing."""
    steps = []
    if not plan.ratings.is_file():
        steps.append(
            ("synth", _py("ncf.cli", "synth", "--scale", plan.scale, "--out", plan.ratings))
        )
    steps.append(("etl", _py("ncf.cli", "etl", "--input", plan.ratings, "--out", plan.etl)))
    if not plan.checkpoint.is_file():
        # A brief run: the inference and Triton benches need a real checkpoint, not a good one.
        brief = ["--epochs", "1"] + (["--preset", "small"] if plan.quick else [])
        steps.append(
            (
                "train",
                _py(
                    "ncf.cli",
                    "train",
                    "--data",
                    plan.etl,
                    "--out",
                    plan.checkpoint.parent,
                    "--force",
                    *brief,
                ),
            )
        )
    if latest_version(plan.repo / "neumf") is None:  # nothing exported yet
        steps.append(
            (
                "export",
                _py(
                    "ncf.cli",
                    "export",
                    "--checkpoint",
                    plan.checkpoint,
                    "--data",
                    plan.etl,
                    "--repo",
                    plan.repo,
                ),
            )
        )
    return steps


def bench_commands(plan: Plan, skip: list[str]) -> list[tuple[str, list[str]]]:
    """One command per benchmark, sized for the plan."""
    r = ["--results-dir", plan.results]
    q = plan.quick
    cmds = {
        "etl": _py(
            "ncf.bench.etl", "--input", plan.ratings, *r, *(["--workers", "1"] if q else [])
        ),
        "train": _py(
            "ncf.bench.train",
            "--data",
            plan.etl,
            *r,
            *(["--batch-sizes", "65536", "--procs", "1", "--steps", "2"] if q else []),
        ),
        "inference": _py(
            "ncf.bench.inference",
            "--checkpoint",
            plan.checkpoint,
            *r,
            *(["--batch-sizes", "1", "1024", "16384", "--max-seconds", "0.3"] if q else []),
        ),
        "triton": _py(
            "ncf.bench.triton",
            "--repo",
            plan.repo,
            *r,
            *(["--concurrency", "1", "4", "--duration", "0.5", "--warmup", "0.2"] if q else []),
        ),
        "soak": _py("ncf.bench.soak", "--repo", plan.repo, *r, *(["--duration", "5"] if q else [])),
    }
    return [(name, cmd) for name, cmd in cmds.items() if name not in skip]


def run_all(args: argparse.Namespace) -> int:
    plan = plan_from(args)
    failed = []
    for name, cmd in prepare(plan):
        if _step(name, cmd) != 0:
            raise RuntimeError(f"ncf bench all: preparing {name} failed; fix it and rerun")
    if "triton" not in args.skip:
        _setup_perf_analyzer()
    for name, cmd in bench_commands(plan, args.skip):
        if _step(f"bench {name}", cmd) != 0:
            failed.append(name)  # the other benches still run; the exit code reports it
    if plan.readme is not None:
        from ncf.bench.readme import update_readme

        update_readme(plan.readme, plan.results)
        print(f"ncf bench all: {plan.readme} results section rewritten from {plan.results}")
    if failed:
        print(f"ncf bench all: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _setup_perf_analyzer() -> None:
    """Build .venv-pa with perf_analyzer if it is not there (the Triton bench falls back to its
    own load generator when this fails, e.g. without PyPI access)."""
    script = Path(__file__).resolve().parent / "setup_perf_analyzer.sh"
    if _step("perf_analyzer setup", ["bash", str(script)]) != 0:
        print(
            "ncf bench all: perf_analyzer unavailable; the Triton bench uses tritonclient threads",
            file=sys.stderr,
        )


def _step(name: str, cmd: list[str]) -> int:
    print(f"== {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    code = subprocess.run(cmd, check=False).returncode
    print(
        f"== {name}: exit {code} after {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return code
