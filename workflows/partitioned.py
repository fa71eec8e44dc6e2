"""The partitioned ETL: one shuffle by user into P partitions, then the per-user steps in each.

Every stage is a set of independent tasks, run on the Dask workers of a cluster (a local one,
``--workers N``, or ``--scheduler``'s) or one after another in this process; no task holds more
than one input block or one partition, so memory per process is bounded by the partition size,
not by the data. Scratch files go to ``SCRATCH`` inside the output's temporary folder (which
every worker must see) and are gone with it.

1. ``scatter`` (a task per input block, ``ncf.workflows.blocks``): read and validate the block,
   and write each of its ratings to its user's partition (:func:`partition.partition_of`):
   ``SCRATCH/shuffle/<p>/<block>.arrow``.
2. ``prepare`` (a task per partition): the partition's pieces in block order (so, input order),
   then :func:`partition.prepare`; the kept ratings go to ``SCRATCH/kept/part_<p>.parquet``.
3. ``fit`` (this process, the Workflow on the cluster): Categorify fitted on every kept rating
   through ``merlin.io.Dataset`` (or the sorted-unique ids of ``--engine pandas``); the
   vocabularies go to ``SCRATCH/encoding.npz``.
4. ``finish`` (a task per partition): :func:`partition.finish`, written as
   ``OUT/<dataset>/part_<p>.parquet``.

Why a shuffle of our own rather than ``dask.dataframe.shuffle``: the pieces are plain files
written by tasks, so the same code runs with or without a cluster, on the Dask of the NGC image
(2023.1) and of the CPU venv alike, and each partition keeps its ratings in input order, which
the tie rules need (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from ncf.core.names import RAW_ITEM, RAW_USER
from ncf.workflows.backend import array_module
from ncf.workflows.blocks import Block, read_block
from ncf.workflows.encoding import Encoding, Vocabulary
from ncf.workflows.output import write_cold, write_part
from ncf.workflows.partition import Prepared, Summary, finish, partition_of, prepare

SCRATCH = ".partitions"
HELD = "held"  # the kept rows' TRAIN/TEST/VALID code column
COLUMNS = ("user", "item", "time")  # and "row" for --ties file-order (Job.file_order)


@dataclasses.dataclass(frozen=True)
class Job:
    """What every task of one run needs (picklable: it travels to the workers)."""

    out: str  # the output's temporary folder (OUT/<dataset>/part_<p>.parquet go there)
    scratch: str
    partitions: int
    min_ratings: int
    holdout: str
    file_order: bool
    negatives: int
    seeds: tuple[int, ...]
    gpu: bool  # run the per-partition steps on cupy arrays
    cold: tuple[float, int] = (0.0, 0)  # --cold-users: (fraction, seed) of users set apart


def run_tasks(client: Any, fn: Callable, items: list, job: Job) -> list:
    """``[fn(item, job) for item in items]``, on the cluster's workers when there is a client."""
    if client is None:
        return [fn(item, job) for item in items]
    futures = client.map(fn, items, job=job, pure=False)
    return client.gather(futures)  # re-raises a task's error (ValueError: the input's fault)


def scatter(block: Block, job: Job) -> int:
    """Read one block and write its ratings to their users' partitions; return its rows."""
    cols = read_block(block)
    part = partition_of(cols["user"], job.partitions)
    order = np.argsort(part, kind="stable")  # by partition, input order kept inside each
    bounds = np.searchsorted(part[order], np.arange(job.partitions + 1))
    for p in range(job.partitions):
        rows = order[bounds[p] : bounds[p + 1]]
        if rows.size:
            folder = Path(job.scratch) / "shuffle" / str(p)
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.table({k: cols[k][rows] for k in _columns(job)})
            feather.write_feather(
                table, folder / f"{block.index}.arrow", compression="uncompressed"
            )
    return int(cols["user"].size)


def prepare_partition(p: int, job: Job) -> Summary:
    """Prepare partition ``p`` from its pieces; write its kept ratings; return its summary."""
    folder = Path(job.scratch) / "shuffle" / str(p)
    pieces = sorted(folder.glob("*.arrow"), key=lambda f: int(f.stem)) if folder.exists() else []
    tables = [feather.read_table(f) for f in pieces]
    cols = {
        k: np.concatenate([t.column(k).to_numpy() for t in tables])
        if tables
        else np.zeros(0, np.int64)
        for k in _columns(job)
    }
    cols["user"], cols["item"] = cols["user"].astype(np.int32), cols["item"].astype(np.int32)
    shutil.rmtree(folder, ignore_errors=True)  # its rows now live in this task
    part = prepare(_device(cols, job.gpu), job.min_ratings, job.holdout, job.file_order, job.cold)
    write_cold(Path(job.out), p, part.cold)
    kept = pa.table(
        {
            RAW_USER: _host(part.user).astype(np.int32),
            RAW_ITEM: _host(part.item).astype(np.int32),
            HELD: _host(part.held),
        }
    )
    pq.write_table(kept, _kept_file(job, p))
    return Summary.of(part)


def finish_partition(p: int, job: Job) -> dict[str, int]:
    """Write partition ``p``'s output rows (model ids); return the rows of each dataset."""
    table = pq.read_table(_kept_file(job, p))
    cols = {
        "user": table.column(RAW_USER).to_numpy(),
        "item": table.column(RAW_ITEM).to_numpy(),
        "held": table.column(HELD).to_numpy(),
    }
    cols = _device(cols, job.gpu)
    part = Prepared(**cols, users=None, counts=None, items=None, dropped={}, dropped_users={})
    encoding = load_encoding(Path(job.scratch), array_module(cols["user"]))
    out = finish(part, encoding, job.negatives, list(job.seeds))
    return write_part(Path(job.out), p, out)


def _columns(job: Job) -> tuple[str, ...]:
    """The columns a partition carries (the line order only where the tie rule uses it)."""
    return (*COLUMNS, "row") if job.file_order else COLUMNS


def _kept_file(job: Job, p: int) -> Path:
    folder = Path(job.scratch) / "kept"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"part_{p}.parquet"


def kept_files(scratch: Path, partitions: int) -> list[Path]:
    """The kept ratings of every partition (raw ``userId``, ``movieId``): what the fit reads."""
    return [scratch / "kept" / f"part_{p}.parquet" for p in range(partitions)]


def _device(cols: dict[str, Any], gpu: bool) -> dict[str, Any]:
    if not gpu:
        return cols
    import cupy

    return {k: cupy.asarray(v) for k, v in cols.items()}


def _host(a: Any) -> np.ndarray:
    return a.get() if type(a).__module__.startswith("cupy") else np.asarray(a)


def save_encoding(scratch: Path, encoding: Encoding) -> None:
    """The vocabularies, for the finish tasks (a few MB even at MLPerf's 3M ids)."""
    np.savez(
        scratch / "encoding.npz",
        user=_host(encoding.user.raw),
        item=_host(encoding.item.raw),
        meta=np.array(
            [
                encoding.user.lo,
                encoding.user.cardinality,
                encoding.item.lo,
                encoding.item.cardinality,
            ]
        ),
        engine=np.array(encoding.engine),
    )


def load_encoding(scratch: Path, xp: Any) -> Encoding:
    with np.load(scratch / "encoding.npz") as z:
        u_lo, u_card, i_lo, i_card = (int(v) for v in z["meta"])
        return Encoding(
            user=Vocabulary(raw=xp.asarray(z["user"]), lo=u_lo, cardinality=u_card),
            item=Vocabulary(raw=xp.asarray(z["item"]), lo=i_lo, cardinality=i_card),
            engine=str(z["engine"]),
        )


def default_partitions(rows: int, partition_rows: int) -> int:
    """Partitions for ``rows`` ratings at most ``partition_rows`` each (at least 1)."""
    return max(1, math.ceil(rows / partition_rows))
