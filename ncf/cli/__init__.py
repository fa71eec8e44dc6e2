"""The ``ncf`` command: one subcommand per pipeline stage.

A stage module exposes ``CONFIG`` (its typed config dataclass, ``ncf.core.config.Config``) and
``run(cfg) -> int``: the command line is generated from ``CONFIG`` (``ncf.core.config.resolve``),
the resolved config is logged, then ``run`` gets it. A module with subcommands of its own
(``ncf bench``) exposes ``run_argv(argv, prog) -> int`` instead. Modules are imported only when their
subcommand runs, so ``ncf synth`` does not pay for torch and ``ncf train`` does not import
NVTabular.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence

from ncf.core import errors  # not `report`: ncf.cli.report is a submodule
from ncf.core.config import Config, resolve

# subcommand -> (module, one-line help). Order is the pipeline's order.
STAGES: dict[str, tuple[str, str]] = {
    "download": (
        "ncf.sources.download",
        "fetch and verify an official MovieLens archive (ml-20m, ml-1m, ...)",
    ),
    "synth": (
        "ncf.sources.synth",
        "ML-20m-like synthetic ratings with planted structure (ratings.csv, or parquet at any scale)",
    ),
    "convert": ("ncf.sources.atomic", "a RecBole atomic .inter file (e.g. ML-100K) as ratings.csv"),
    "expand": (
        "ncf.sources.expand",
        "grow a ratings file by a randomized Kronecker expansion (MLPerf: users x16, items x32)",
    ),
    "etl": ("ncf.workflows.cli", "NVTabular ETL: ids, leave-one-out split, exact eval negatives"),
    "train": ("ncf.models.train", "train NeuMF (DLE defaults; torchrun for DDP; --amp)"),
    "evaluate": (
        "ncf.models.evaluate",
        "HR@10/NDCG@10 of a checkpoint and of the ItemPop baseline",
    ),
    "tune": (
        "ncf.models.tune",
        "hyperparameter search (Optuna) on the validation split; resumable",
    ),
    "export": (
        "ncf.serving.export",
        "export a checkpoint to TorchScript + ONNX in a Triton repository",
    ),
    "serve": ("ncf.serving.serve", "run a real tritonserver on the model repository (127.0.0.1)"),
    "recommend": (
        "ncf.serving.recommend",
        "one user's top-k movies from the running server, titled",
    ),
    "bench": ("ncf.bench.cli", "benchmarks: inference, triton, etl, train"),
    "run": (
        "ncf.cli.pipeline",
        "the whole pipeline end to end on one ratings file (what `make run` does)",
    ),
    "retrain": (
        "ncf.cli.retrain",
        "a day's retrain from the previous run: same ids, warm start, export, live switch",
    ),
}

EXAMPLES = """examples:
  ncf synth --scale 0.01 --out data/synth/ratings.csv
  ncf synth --scale 10 --format parquet --out data/synth/s10
  ncf expand data/ml-latest-small/ratings.csv --out data/expanded/small-16x32.parquet
  ncf etl --input data/ml-latest-small/ratings.csv --out work/etl
  ncf train --data work/etl --out work/train --preset small
  torchrun --nproc_per_node=2 -m ncf.cli train --data work/etl --out work/train2
  ncf evaluate --data work/etl --checkpoint work/train/best.pt --full-ranking
  ncf tune --data work/etl --out work/tune --model mf --preset mf-small --trials 30
  ncf export --checkpoint work/train/best.pt --data work/etl --repo triton_repo
  ncf serve --repo triton_repo
  ncf recommend --user 1 --k 10
  ncf bench triton --repo triton_repo
  ncf run
  ncf retrain --previous runs/RUN --input data/today/ratings.csv --server-url 127.0.0.1:8000
"""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``ncf --help`` lists the commands (each has its own generated
    ``--help``); it imports no stage."""
    parser = argparse.ArgumentParser(
        prog="ncf",
        description="Neural Collaborative Filtering (NeuMF) on MovieLens: NVTabular ETL, "
        "PyTorch training (AMP, DDP), Triton serving and benchmarks.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in STAGES.items():
        sub.add_parser(name, help=help_, description=help_)
    return parser


def log_config(stage: str, cfg: Config) -> None:
    """Print the resolved configuration of a stage (rank 0 only) as one JSON line on stderr."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    values = json.dumps(cfg.to_dict(), default=str, sort_keys=True)
    print(f"ncf {stage} config: {values}", file=sys.stderr)


def parse_command(argv: Sequence[str]) -> Config:
    """The resolved config ``ncf ARGV`` would run with, parsed and checked but not run (README,
    compose and gpu_check tests). Raises ValueError (one line) when ``argv`` does not parse."""
    stage, rest = argv[0], list(argv[1:])
    if stage not in STAGES:
        raise ValueError(f"unknown command {stage!r}; commands: {', '.join(STAGES)}")
    module = importlib.import_module(STAGES[stage][0])
    if hasattr(module, "parse_argv"):  # subcommands of its own
        return module.parse_argv(rest, f"ncf {stage}")
    return resolve(module.CONFIG, rest, stage, f"ncf {stage}")


def _dispatch(stage: str, argv: list[str]) -> int:
    """Parse ``argv`` for ``stage`` and run it."""
    module = importlib.import_module(STAGES[stage][0])
    prog = f"ncf {stage}"
    if hasattr(module, "run_argv"):  # subcommands of its own
        return int(module.run_argv(argv, prog) or 0)
    cfg = resolve(module.CONFIG, argv, stage, prog)
    log_config(stage, cfg)
    try:
        return int(module.run(cfg) or 0)
    except errors.HANDLED as exc:  # with the config, the line names the flag of a failing path
        return errors.report(prog, exc, cfg)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in STAGES:
        parser = build_parser()
        if argv and argv[0] in ("-h", "--help"):
            parser.print_help()
            return 0
        parser.print_usage(sys.stderr)
        if argv:
            print(f"ncf: error: unknown command {argv[0]!r}; commands: {', '.join(STAGES)}",
                  file=sys.stderr)  # fmt: skip
        return 2
    stage = argv[0]
    try:
        return _dispatch(stage, argv[1:])
    except errors.HANDLED as exc:
        # The error boundary (ncf.core.errors): bad input (exit 2) or an environment fault such as
        # an unwritable --out (exit 1) is one line naming the path and the fix; NCF_DEBUG=1 raises.
        return errors.report(f"ncf {stage}", exc)
    except KeyboardInterrupt:
        print(f"ncf {stage}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
