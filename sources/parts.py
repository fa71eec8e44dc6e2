"""Partitioned parquet ratings (`ncf synth --format parquet`, `ncf expand`): a folder of part files.

Layout of an output folder ``F`` (``--out`` ending in ``.parquet``, or ``--out DIR`` for
``DIR/ratings.parquet``)::

    F/part_00000.parquet, F/part_00001.parquet, ...   the rows, in order
    F/.ncf-output.json                                the marker naming the command (ncf.core.atomic)
    F.config.json (beside F, e.g. ratings.parquet.config.json)   the resolved config of the command

Every part has exactly the columns of ``ncf.core.names.RAW_COLUMNS`` with the ratings reader's
types: ``userId`` int32, ``movieId`` int32, ``rating`` float32, ``timestamp`` int64. Each block a
generator yields becomes one or more row groups of at most ``ROW_GROUP`` rows; a part file is closed
at the first block boundary at or past ``part_ratings`` rows, so parts hold whole blocks. Parquet
readers (pyarrow, dask, Merlin) skip the hidden marker, so ``F`` reads as one dataset.

The folder is built under a temporary name and renamed into place (``ncf.core.atomic.atomic_dir``):
an interrupted run leaves no partial output, and ``--force`` replaces only a folder holding the
same command's marker. Blocks are written as they come, so memory holds one block at a time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncf.core import names
from ncf.core.atomic import atomic_dir, check_replaceable, written_by

SCHEMA = pa.schema(
    [
        (names.RAW_USER, pa.int32()),
        (names.RAW_ITEM, pa.int32()),
        (names.RAW_RATING, pa.float32()),
        (names.RAW_TIME, pa.int64()),
    ]
)
DTYPES = {f.name: np.dtype(f.type.to_pandas_dtype()) for f in SCHEMA}
FOLDER_SUFFIX = ".parquet"
DEFAULT_FOLDER = "ratings.parquet"
PART = "part_{:05d}.parquet"
ROW_GROUP = 1 << 20  # rows per row group at most (a reader's unit of work)


def output_folder(out: str | os.PathLike) -> Path:
    """``--out`` ending in ``.parquet`` is the folder; any other path is a folder to hold
    ``ratings.parquet/``."""
    out = Path(out)
    return out if out.suffix.lower() == FOLDER_SUFFIX else out / DEFAULT_FOLDER


def config_path(folder: Path) -> Path:
    """Where a command records its resolved config: ``<folder name>.config.json`` beside it
    (outside the folder, which parquet readers list)."""
    return folder.with_name(folder.name + ".config.json")


def check_output(
    folder: Path, owner: str, force: bool, inputs: tuple[str | os.PathLike, ...] = ()
) -> None:
    """Raise before any work unless ``ncf OWNER`` may write ``folder`` and its config beside it.

    ``folder`` may be absent or, with ``force``, an empty folder or ``owner``'s output (its
    marker); the config file beside it absent or ``owner``'s (``ncf.core.atomic`` rules).
    """
    if folder.exists() or folder.is_symlink():
        check_replaceable(folder, owner, inputs)
        if not force:
            raise FileExistsError(f"{folder} already exists; pass --force to replace it")
    record = config_path(folder)
    if (record.exists() or record.is_symlink()) and written_by(record) != owner:
        raise FileExistsError(
            f"{record} is not a config file `ncf {owner}` wrote: move it away, or choose "
            "another --out"
        )


@dataclass(frozen=True)
class Written:
    """What ``write_parts`` wrote."""

    folder: Path
    rows: int
    parts: int


def _table(block: dict[str, np.ndarray]) -> pa.Table:
    """The block as an Arrow table of ``SCHEMA``; its arrays must already have the exact dtypes."""
    for name, dtype in DTYPES.items():
        if block[name].dtype != dtype:  # a bug in a generator, not bad input
            raise TypeError(f"column {name}: dtype {block[name].dtype}, expected {dtype}")
    return pa.table({name: block[name] for name in DTYPES}, schema=SCHEMA)


def write_parts(
    blocks: Iterable[dict[str, np.ndarray]],
    folder: Path,
    part_ratings: int,
    owner: str,
    force: bool,
    inputs: tuple[str | os.PathLike, ...] = (),
) -> Written:
    """Write ``blocks`` (column name -> array, ``SCHEMA``'s dtypes) as the parts of ``folder``.

    Parameters
    ----------
    blocks
        Consumed one at a time (a generator keeps memory to one block).
    folder
        The output folder; an existing one is replaced only with ``force`` and only if it holds
        ``owner``'s marker (FileExistsError otherwise, before any block is drawn).
    part_ratings
        A part is closed at the first block boundary at or past this many rows.
    owner, inputs
        The command's name (``"synth"``) and input paths (none may lie inside ``folder``).

    Returns
    -------
    Written
        The folder, rows and number of part files. A generator yielding no row gives one empty
        part (the schema, no rows).
    """
    rows = parts = in_part = 0
    with atomic_dir(folder, overwrite=force, owner=owner, inputs=inputs) as tmp:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; a data folder is readable
        with contextlib.ExitStack() as part:
            writer = None
            for block in blocks:
                table = _table(block)
                if writer is None:
                    writer = _open_part(part, tmp / PART.format(parts))
                writer.write_table(table, row_group_size=ROW_GROUP)
                rows, in_part = rows + table.num_rows, in_part + table.num_rows
                if in_part >= part_ratings:
                    part.close()  # closes the writer, then fsyncs and closes the file
                    writer, parts, in_part = None, parts + 1, 0
            if writer is None and parts == 0:
                writer = _open_part(part, tmp / PART.format(parts))
            if writer is not None:
                parts += 1
    return Written(folder, rows, parts)


def _open_part(stack: contextlib.ExitStack, path: Path) -> pq.ParquetWriter:
    """A parquet writer on ``path``; ``stack.close()`` closes it (the footer), then fsyncs the file."""
    writer = pq.ParquetWriter(str(path), SCHEMA)
    stack.callback(_fsync, path)  # callbacks run last-in first-out: close, then fsync
    stack.callback(writer.close)
    return writer


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
