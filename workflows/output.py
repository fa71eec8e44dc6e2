"""Write the ETL's parquet datasets (``train/``, ``test/``, ``negatives/``, and with
``--holdout valid,test`` also ``valid/``, ``valid_negatives/``), the pandas vocab, and with
``--cold-users`` the held-out users' own ratings (``cold_users/``, raw ids).

Each dataset is a directory of ``part_<p>.parquet`` files, one per partition of users (one
file, ``part_0.parquet``, in memory), with int64 columns ``user_id`` and ``item_id`` (model ids).
Each file is sorted by ``user_id`` and holds every row of its users: a user's training rows in
the input's order, its negatives in draw order. Read as one dataset in ``user_id`` order (a
stable sort of the files in natural order), every partitioning gives the same rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncf.core.names import (
    COLD_USERS_DIR,
    ITEM,
    NEGATIVES_DIR,
    RAW_ITEM,
    RAW_TIME,
    RAW_USER,
    TEST_DIR,
    TRAIN_DIR,
    USER,
    VALID_DIR,
    VALID_NEGATIVES_DIR,
)
from ncf.workflows.backend import to_numpy
from ncf.workflows.encoding import Encoding

ROW_GROUP = 1 << 20  # rows per parquet row group: the unit a parallel reader splits on
VOCAB_DIR = "vocab"


# Each dataset's rows-count key in metadata.json.
COUNT_KEYS = {
    TRAIN_DIR: "train_rows",
    TEST_DIR: "test_rows",
    NEGATIVES_DIR: "negative_rows",
    VALID_DIR: "valid_rows",
    VALID_NEGATIVES_DIR: "valid_negative_rows",
}


def part_file(index: int) -> str:
    """The file of partition ``index`` in every dataset folder."""
    return f"part_{index}.parquet"


def write_dataset(path: Path, user: np.ndarray, item: np.ndarray, index: int = 0) -> int:
    """Write partition ``index`` of one dataset from int64 ``user_id``/``item_id``; return its rows."""
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table({USER: user, ITEM: item})
    pq.write_table(table, path / part_file(index), row_group_size=ROW_GROUP)
    return table.num_rows


def write_part(out: Path, index: int, rows: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict:
    """Write partition ``index`` of every dataset (``partition.finish``'s rows) under ``out``;
    return the row counts under their ``metadata.json`` keys."""
    # Arrow encodes and compresses without the GIL: the datasets are written in parallel.
    with ThreadPoolExecutor(len(rows)) as pool:
        futures = {
            COUNT_KEYS[name]: pool.submit(write_dataset, out / name, *pair, index)
            for name, pair in rows.items()
        }
        return {key: f.result() for key, f in futures.items()}


def write_cold(out: Path, index: int, cold: dict[str, Any] | None) -> None:
    """Write partition ``index`` of the cold users' ratings (``ncf etl --cold-users``) under
    ``out/cold_users/``: raw ``userId``, ``movieId``, ``timestamp``, by user then time."""
    if cold is None:
        return
    user, item, time = (to_numpy(cold[k]) for k in ("user", "item", "time"))
    order = np.lexsort((item, time, user))  # by user, then time (ties: the smaller movieId)
    table = pa.table({RAW_USER: user[order].astype(np.int64), RAW_ITEM: item[order].astype(np.int64),
                      RAW_TIME: time[order].astype(np.int64)})  # fmt: skip
    folder = out / COLD_USERS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / part_file(index))


def write_vocab(out: Path, encoding: Encoding) -> dict[str, Path]:
    """``--engine pandas``: write each vocabulary like Categorify does (``vocab/unique.<col>.parquet``:
    raw ids in model-id order, pandas index = model id)."""
    import pandas as pd

    files = {}
    for key, column, vocab in (
        ("user", RAW_USER, encoding.user),
        ("item", RAW_ITEM, encoding.item),
    ):
        path = out / VOCAB_DIR / f"unique.{column}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        index = pd.RangeIndex(vocab.lo, vocab.hi)
        frame = pd.DataFrame({column: to_numpy(vocab.raw).astype(np.int64)}, index=index)
        pq.write_table(pa.Table.from_pandas(frame), path)
        files[key] = path
    return files
