"""``ncf etl``: MovieLens ratings -> model ids, leave-one-out split and exact evaluation negatives.

Imports nothing heavy at module level: ``ncf --help`` and ``--engine pandas`` never load NVTabular.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"

EPILOG = """rules: duplicate (user, item) pairs keep their latest rating; users with fewer than
--min-ratings interactions are dropped (and, for --holdout valid,test, users with fewer than 3);
each user's latest interaction is the test item, and with --holdout valid,test the one before it
the valid item (ties on timestamp: --ties); negatives are --negatives distinct items per user and
held-out split, uniform over the items the user never rated, never a positive.

output in OUT: train/ test/ negatives/ (and valid/ valid_negatives/) (parquet, int64 user_id,
item_id), workflow/ (the saved NVTabular Workflow; --engine pandas writes vocab/ instead) and
metadata.json. OUT is written to a temporary directory and renamed into place. Rerunning with the
same input and options reuses OUT; --force rebuilds it. Protocol: docs/PROTOCOL.md.

a running Dask cluster: --scheduler tcp://HOST:8786 (or DASK_SCHEDULER_ADDRESS) fits the Workflow on
its workers (`dask worker`; `dask cuda worker` when this host has a GPU) instead of in this
process; OUT must then be on a filesystem every worker mounts at the same path. The output is the
same as without it."""


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
        "--scheduler",
        metavar="ADDRESS",
        help=f"fit on the running Dask cluster of this scheduler (e.g. tcp://node0:8786) instead "
        f"of in this process; default: ${SCHEDULER_ENV} when set (--engine nvtabular, no --workers)",
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
    from ncf.core.options import call_with_args
    from ncf.workflows.etl import EtlOptions, run_etl

    opts = call_with_args(EtlOptions, args, scheduler=resolve_scheduler(args))
    run_etl(opts)
    return 0


def resolve_scheduler(args: argparse.Namespace) -> str | None:
    """``--scheduler``, else ``$DASK_SCHEDULER_ADDRESS`` where it can apply, else None.

    The flags win over the environment: the variable is ignored with ``--engine pandas`` (no Dask)
    and with ``--workers N > 1`` (a local cluster was asked for).
    """
    if args.scheduler:
        return args.scheduler
    address = os.environ.get(SCHEDULER_ENV, "").strip()
    if not address or args.engine != "nvtabular" or args.workers > 1:
        return None
    print(f"ncf etl: using the Dask scheduler at {address} (${SCHEDULER_ENV})", file=sys.stderr)
    return address
