"""``ncf bench``: the benchmarks, one subcommand each, and ``all`` (what ``make bench`` runs).

    ncf bench inference | triton | etl | train [options]   # one benchmark (see --help of each)
    ncf bench all [--quick]                                # everything, then the README section
    ncf bench readme                                       # README section from bench/results/

``all`` works on the full-scale synthetic data (``ncf synth --scale 1.0`` into
``data/synth/ml20m/ratings.csv`` if missing), ETLs it, trains briefly when there is no checkpoint,
exports the Triton repository, then runs every benchmark in its own process (so each gets its own
peak RSS) and rewrites the README's results section. ``--quick`` is a small-scale smoke run whose
results go to ``work/bench/quick/results`` (the committed ``bench/results`` stay untouched).
Every step runs through ``ncf.core.runner.Runner``: its config is written to ``WORK/configs/`` and
run as ``python -m ncf.cli STAGE --config FILE``.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.core.config import Config, flag, main_error, resolve, setting, write_config
from ncf.core.runner import Runner, StageFailed
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
    # not part of `ncf bench all`: 20M-200M ratings (an hour here), RecBole in its own venv
    # (`make peers`), and a diagnostic
    "etl-scale": ("ncf.bench.etl_scale", "ETL time and memory per process, 20M to 200M ratings"),
    "large-batch": (
        "ncf.bench.large_batch",
        "HR@10 at 4x the batch with and without the learning-rate rule",
    ),
    "warm-start": (
        "ncf.bench.warm_start",
        "a day's retrain warm-started from yesterday's model against a cold one",
    ),
    "cold-start": (
        "ncf.bench.cold_start",
        "users the model never saw, scored from their first N ratings, against popularity",
    ),
    "etl-kernels": ("ncf.bench.etl_kernels", "the ETL's per-partition steps on numpy and cupy"),
    "peers": ("ncf.bench.peers", "RecBole's NeuMF and BPR-MF on our split (needs `make peers`)"),
    "transfer": (
        "ncf.bench.transfer",
        "candidate training defaults on several data sets, validation only",
    ),
    "profile": ("ncf.bench.profile_step", "torch.profiler table of one training step's operators"),
    "readme": ("ncf.bench.readme", "rewrite the README results section from bench/results"),
}
ALL_BENCHES = ("etl", "train", "inference", "triton", "soak")  # what `all` runs, in this order


@dataclass
class AllConfig(Config):
    """Every benchmark on full-scale synthetic data, then the README."""

    quick: bool = flag(
        False, help="small-scale smoke run (scale 0.01, short points) into work/bench/quick"
    )
    scale: float = setting(0.0, help="synthetic scale (0: 1.0, quick 0.01)")
    work: Path | None = setting(None, help="ETL/run/repo folder (default work/bench)")
    results_dir: Path | None = setting(None, help="default bench/results (quick: WORK/results)")
    readme: Path | None = setting(None, help="README to rewrite (default README.md; quick: none)")
    skip: list[str] = setting(
        default_factory=list, choices=sorted(set(BENCHES) - {"readme"}), help="benches to skip"
    )

    def check(self) -> None:
        if self.scale < 0:
            raise ValueError(f"--scale {self.scale}: must be > 0 (or 0 for the default)")


def usage(prog: str) -> str:
    """The list of benches (``ncf bench --help``)."""
    lines = [f"usage: {prog} BENCH [options]   (BENCH --help for its options)", "", "benches:"]
    lines += [f"  {name:10s} {help_}" for name, (_, help_) in BENCHES.items()]
    lines.append(f"  {'all':10s} {AllConfig.__doc__.splitlines()[0]}")
    return "\n".join(lines)


def parse_argv(argv: list[str], prog: str = "ncf bench") -> Config:
    """The resolved config ``ncf bench BENCH ARGS`` would run with (nothing is run)."""
    if not argv or argv[0] not in (*BENCHES, "all"):
        raise ValueError(f"unknown bench {argv[:1]}; benches: {', '.join(BENCHES)}, all")
    name, rest = argv[0], list(argv[1:])
    if name == "all":
        return resolve(AllConfig, rest, "bench all", f"{prog} all")
    module = importlib.import_module(BENCHES[name][0])
    return resolve(module.CONFIG, rest, f"bench {name}", f"{prog} {name}")


def run_argv(argv: list[str], prog: str = "ncf bench") -> int:
    """``ncf bench BENCH ARGS``: run one bench (its results record ``PROG BENCH ARGS``) or ``all``."""
    if not argv:
        print(usage(prog), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):  # as argparse's help: print, exit 0
        print(usage(prog))
        raise SystemExit(0)
    name, rest = argv[0], list(argv[1:])
    where = f"{prog} {name}"
    if name == "all":
        try:
            return run_all(resolve(AllConfig, rest, "bench all", where))
        except (ValueError, FileNotFoundError, StageFailed) as exc:
            return main_error(where, exc)
    if name not in BENCHES:
        return main_error(
            prog, ValueError(f"unknown bench {name!r}; benches: {', '.join(BENCHES)}, all")
        )
    try:
        module = importlib.import_module(BENCHES[name][0])
    except ImportError as exc:  # a host without that bench's stack
        return main_error(where, ImportError(f"{BENCHES[name][0]} cannot be imported here: {exc}"))
    return entry.run_bench(module, name, rest, where)


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


def plan_from(cfg: AllConfig) -> Plan:
    """Resolve ``all``'s defaults (quick runs never touch bench/results or the README)."""
    quick = cfg.quick
    scale = cfg.scale or (0.01 if quick else 1.0)
    name = "ml20m" if scale == 1.0 else f"scale{scale:g}"
    work = cfg.work or (Path("work/bench/quick") if quick else Path("work/bench"))
    results = cfg.results_dir or (work / "results" if quick else RESULTS_DIR)
    readme = cfg.readme or (None if quick else Path("README.md"))
    return Plan(quick, scale, Path("data/synth") / name / "ratings.csv", work, results, readme)


# A step: (record name, ``ncf`` stage, the stage's config).
Step = tuple[str, str, Config]


def prepare(plan: Plan) -> list[Step]:
    """Steps that make the inputs (data, ETL, checkpoint, Triton repository) still missing."""
    from ncf.models.train import TrainRunConfig
    from ncf.serving.export import ExportConfig
    from ncf.sources.synth import SynthConfig
    from ncf.workflows.etl import EtlConfig

    steps: list[Step] = []
    if not plan.ratings.is_file():
        steps.append(("synth", "synth", SynthConfig(scale=plan.scale, out=plan.ratings)))
    steps.append(("etl", "etl", EtlConfig(input=plan.ratings, out=plan.etl)))
    if not plan.checkpoint.is_file():
        # A brief run: the inference and Triton benches need a real checkpoint, not a good one.
        preset = "small" if plan.quick else "dle"
        train = TrainRunConfig.from_preset(
            preset, data=plan.etl, out=plan.checkpoint.parent, force=True, epochs=1
        )
        steps.append(("train", "train", train))
    if latest_version(plan.repo / "neumf") is None:  # nothing exported yet
        export = ExportConfig(checkpoint=plan.checkpoint, data=plan.etl, repo=plan.repo)
        steps.append(("export", "export", export))
    return steps


def bench_configs(plan: Plan, skip: list[str]) -> list[tuple[str, Config | None]]:
    """Each benchmark of ``all`` with its config sized for the plan (None: it cannot be imported
    on this host)."""
    q = plan.quick
    values = {
        "etl": {"input": plan.ratings, **({"workers": "1"} if q else {})},
        "train": {
            "data": plan.etl,
            **({"batch_sizes": [65536], "procs": [1], "steps": 2} if q else {}),
        },
        "inference": {
            "checkpoint": plan.checkpoint,
            **({"batch_sizes": [1, 1024, 16384], "max_seconds": 0.3} if q else {}),
        },
        "triton": {
            "repo": plan.repo,
            **({"concurrency": [1, 4], "duration": 0.5, "warmup": 0.2} if q else {}),
        },
        "soak": {"repo": plan.repo, **({"duration": 5.0} if q else {})},
    }
    out: list[tuple[str, Config | None]] = []
    for name in ALL_BENCHES:
        if name in skip:
            continue
        try:
            module = importlib.import_module(BENCHES[name][0])
        except ImportError as exc:
            print(f"ncf bench all: {name} cannot run here: {exc}", file=sys.stderr)
            out.append((name, None))
            continue
        out.append((name, module.CONFIG(**values[name], results_dir=plan.results)))
    return out


def run_all(cfg: AllConfig) -> int:
    plan = plan_from(cfg)
    runner = Runner(plan.work / "configs")
    resolved = {"scale": plan.scale, "work": plan.work, "results_dir": plan.results}
    write_config(runner.config_dir / "bench-all.json", cfg.replace(**resolved), "bench all")
    for step in prepare(plan):
        try:
            runner.run(*step)
        except StageFailed as exc:
            raise StageFailed(f"preparing {step[0]} failed: {exc}") from None
    if "triton" not in cfg.skip:
        _setup_perf_analyzer()
    failed = []
    for name, bench_cfg in bench_configs(plan, cfg.skip):
        try:
            if bench_cfg is None:
                raise StageFailed(f"bench {name} cannot be imported here")
            runner.run(f"bench-{name}", f"bench {name}", bench_cfg)
        except StageFailed:
            failed.append(name)  # the other benches still run; the exit code reports it
    if plan.readme is not None:
        from ncf.bench.readme import update_readme

        update_readme(plan.readme, plan.results)
        print(f"ncf bench all: {plan.readme} results section rewritten from {plan.results}")
    for record in runner.records:  # what ran, for how long: each can be rerun alone
        print(f"== {record['stage']}: exit {record['rc']} after {record['seconds']} s: "
              f"{record['command']}", file=sys.stderr)  # fmt: skip
    if failed:
        print(f"ncf bench all: failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _setup_perf_analyzer() -> None:
    """Build .venv-pa with perf_analyzer if it is not there (the Triton bench falls back to its
    own load generator when this fails, e.g. without PyPI access)."""
    script = Path(__file__).resolve().parent / "setup_perf_analyzer.sh"
    if subprocess.run(["bash", str(script)], check=False).returncode != 0:
        print(
            "ncf bench all: perf_analyzer unavailable; the Triton bench uses tritonclient threads",
            file=sys.stderr,
        )
