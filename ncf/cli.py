"""The ``ncf`` command: one subcommand per pipeline stage.

Each stage lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
modules are imported only when their subcommand runs, so ``ncf synth`` does not pay for torch and
``ncf train`` does not import NVTabular.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence

# subcommand -> (module, one-line help). Order is the pipeline's order.
STAGES: dict[str, tuple[str, str]] = {
    "download": (
        "datasets.download",
        "fetch and verify an official MovieLens archive (ml-20m, ml-1m, ...)",
    ),
    "synth": (
        "datasets.synth",
        "write an ML-20m-like synthetic ratings.csv with planted structure",
    ),
    "convert": ("datasets.atomic", "a RecBole atomic .inter file (e.g. ML-100K) as ratings.csv"),
    "etl": ("workflows.cli", "NVTabular ETL: ids, leave-one-out split, exact eval negatives"),
    "train": ("models.train", "train NeuMF (DLE defaults; torchrun for DDP; --amp)"),
    "evaluate": ("models.evaluate", "HR@10/NDCG@10 of a checkpoint and of the ItemPop baseline"),
    "tune": ("models.tune", "hyperparameter search (Optuna) on the validation split; resumable"),
    "export": (
        "serving.export",
        "export a checkpoint to TorchScript + ONNX in a Triton repository",
    ),
    "serve": ("serving.serve", "run a real tritonserver on the model repository (127.0.0.1)"),
    "recommend": ("serving.recommend", "one user's top-k movies from the running server, titled"),
    "bench": ("bench.cli", "benchmarks: inference, triton, etl, train"),
    "run": (
        "ncf.pipeline",
        "the whole pipeline end to end on one ratings file (what `make run` does)",
    ),
}

EXAMPLES = """examples:
  ncf synth --scale 0.01 --out data/synth/ratings.csv
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
"""


def build_parser(stages: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Build the argument parser; ``stages`` limits which stage modules get imported."""
    parser = argparse.ArgumentParser(
        prog="ncf",
        description="Neural Collaborative Filtering (NeuMF) on MovieLens: NVTabular ETL, "
        "PyTorch training (AMP, DDP), Triton serving and benchmarks.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in STAGES.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if stages is None or name in stages:
            importlib.import_module(module).add_arguments(p)
    return parser


def log_config(stage: str, args: argparse.Namespace) -> None:
    """Print the resolved configuration of a stage (rank 0 only) as one JSON line on stderr."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    cfg = {k: v for k, v in vars(args).items() if k not in ("command",)}
    print(f"ncf {stage} config: {json.dumps(cfg, default=str, sort_keys=True)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Import only the module of the chosen stage (plain `ncf --help` imports all of them).
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([chosen] if chosen in STAGES else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    log_config(args.command, args)
    module = importlib.import_module(STAGES[args.command][0])
    try:
        return int(module.run(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        # Input errors: one clear line, no traceback (the message names the file/row/fix).
        print(f"ncf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ncf {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
