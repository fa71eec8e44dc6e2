"""``ncf etl``: MovieLens ratings -> model ids, leave-one-out split and exact evaluation negatives.

The settings are ``ncf.workflows.etl.EtlConfig``. Imports nothing heavy at module level beyond
that module's numpy: ``ncf --help`` and ``--engine pandas`` never load NVTabular.
"""

from __future__ import annotations

import os
import sys

from ncf.workflows.etl import SCHEDULER_ENV, EtlConfig, run_etl

CONFIG = EtlConfig
__all__ = ["CONFIG", "resolve_scheduler", "run"]


def run(cfg: EtlConfig) -> int:
    """Run the ETL with the resolved ``cfg``; return the exit code."""
    run_etl(cfg.replace(scheduler=resolve_scheduler(cfg)))
    return 0


def resolve_scheduler(cfg: EtlConfig) -> str | None:
    """``--scheduler``, else ``$DASK_SCHEDULER_ADDRESS`` where it can apply, else None.

    The flags win over the environment: the variable is ignored with ``--engine pandas`` (no Dask)
    and with ``--workers N > 1`` (a local cluster was asked for).
    """
    if cfg.scheduler:
        return cfg.scheduler
    address = os.environ.get(SCHEDULER_ENV, "").strip()
    if not address or cfg.engine != "nvtabular" or cfg.workers > 1:
        return None
    print(f"ncf etl: using the Dask scheduler at {address} (${SCHEDULER_ENV})", file=sys.stderr)
    return address
