"""``ncf etl``: MovieLens ratings -> model ids, leave-one-out split and exact evaluation negatives.

Imports nothing heavy at module level: ``ncf --help`` and ``--engine pandas`` never load NVTabular.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """rules: duplicate (user, item) pairs keep their latest rating; users with fewer than
--min-ratings interactions are dropped (and, for --holdout valid,test, users with fewer than 3);
each user's latest interaction is the test item, and with --holdout valid,test the one before it
the valid item (ties on timestamp: --ties); negatives are --negatives distinct items per user and
held-out split, uniform over the items the user never rated, never a positive.

output in OUT: train/ test/ negatives/ (and valid/ valid_negatives/) (parquet, int64 user_id,
item_id), workflow/ (the saved NVTabular Workflow; --engine pandas writes vocab/ instead) and
metadata.json. OUT is written to a temporary directory and renamed into place. Rerunning with the
same input and options reuses OUT; --force rebuilds it. Protocol: docs/PROTOCOL.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``ncf etl`` flags to ``parser``."""
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--input",
        type=Path,
        required=True,
        help="ML-20m ratings.csv (header userId,movieId,rating,timestamp) or ML-1M ratings.dat",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="output directory (written atomically)"
    )
    parser.add_argument(
        "--negatives",
        type=int,
        default=100,
        help="evaluation negatives per test user (100 DLE, 999 MLPerf; default 100)",
    )
    parser.add_argument(
        "--min-ratings",
        type=int,
        default=20,
        help="drop users with fewer interactions after de-duplication (default 20)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="run the Workflow on a local Dask cluster of N workers (default 1: no cluster)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the negative sampler (default 0)"
    )
    parser.add_argument(
        "--engine",
        choices=("nvtabular", "pandas"),
        default="nvtabular",
        help="nvtabular: Categorify Workflow on cuDF/pandas (default); pandas: "
        "fallback for hosts without Merlin (sorted-unique ids, no workflow/)",
    )
    parser.add_argument(
        "--holdout",
        choices=("valid,test", "test"),
        default="valid,test",
        help="held-out interactions per user: valid,test (latest -> test/, the one before -> "
        "valid/, for model selection; default) or test (DLE's layout, ML-20m parity)",
    )
    parser.add_argument(
        "--ties",
        choices=("item-id", "file-order"),
        default="item-id",
        help="which same-second interaction is the latest: item-id (larger movieId; default) "
        "or file-order (later line of the input file)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild OUT even if it can be reused")


def run(args: argparse.Namespace) -> int:
    """Run the ETL with parsed ``args``; return the exit code."""
    from workflows.etl import EtlOptions, run_etl

    opts = EtlOptions(
        input=args.input,
        out=args.out,
        negatives=args.negatives,
        min_ratings=args.min_ratings,
        workers=args.workers,
        seed=args.seed,
        engine=args.engine,
        force=args.force,
        holdout=args.holdout,
        ties=args.ties,
    )
    run_etl(opts)
    return 0
