"""Write the ETL's parquet datasets (``train/``, ``test/``, ``negatives/``, and with
``--holdout valid,test`` also ``valid/``, ``valid_negatives/``) and the pandas vocab.

Each dataset is a directory holding ``part_0.parquet`` with int64 columns ``user_id`` and
``item_id`` (model ids). ``test/``, ``valid/`` and both negatives are sorted by ``user_id``;
``train/`` keeps the input's order (minus the held-out rows).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ncf.core.names import (
    ITEM,
    NEGATIVES_DIR,
    RAW_ITEM,
    RAW_USER,
    TEST_DIR,
    TRAIN_DIR,
    USER,
    VALID_DIR,
    VALID_NEGATIVES_DIR,
)
from ncf.workflows.backend import to_numpy
from ncf.workflows.encoding import Encoding

PART_FILE = "part_0.parquet"
ROW_GROUP = 1 << 20  # rows per parquet row group: the unit a parallel reader splits on
VOCAB_DIR = "vocab"


@dataclasses.dataclass
class Outputs:
    """Dense ids (``model id - lo``) of one run's results, on host or device."""

    user: Any  # int32 [n] user index of every kept rating
    item: Any  # int32 [n] item index
    test: Any  # bool [n] leave-one-out test rows
    neg_user: Any  # int64 [n_users * negatives], sorted
    neg_item: Any  # int64 [n_users * negatives]
    encoding: Encoding
    valid: Any = None  # bool [n] validation rows (--holdout valid,test), or None
    valid_neg_user: Any = None  # int64 [n_users * negatives], sorted
    valid_neg_item: Any = None


def write_dataset(path: Path, user: np.ndarray, item: np.ndarray) -> int:
    """Write one dataset directory from int64 ``user_id``/``item_id`` arrays; return its row count."""
    path.mkdir(parents=True, exist_ok=True)
    table = pa.table({USER: user, ITEM: item})
    pq.write_table(table, path / PART_FILE, row_group_size=ROW_GROUP)
    return table.num_rows


def _ids(index: np.ndarray, lo: int) -> np.ndarray:
    """Model ids (int64) from dense indices: ``lo + index``."""
    return index.astype(np.int64) + lo


def _held_out(user: np.ndarray, item: np.ndarray, mask: np.ndarray, n_users: int) -> np.ndarray:
    """Item of each user's one held-out row, indexed by user (i.e. sorted by user)."""
    held = np.empty(n_users, dtype=np.int64)
    held[user[mask]] = item[mask]
    return held


def write_outputs(out: Path, o: Outputs) -> dict[str, int]:
    """Write ``train/``, ``test/``, ``negatives/`` (and ``valid/``, ``valid_negatives/`` when
    ``o.valid`` is set) under ``out``; return their row counts."""
    u_lo, i_lo = o.encoding.user.lo, o.encoding.item.lo
    user, item, test = to_numpy(o.user), to_numpy(o.item), to_numpy(o.test)
    # Exactly one test row per user: place each at its user's index, i.e. sorted by user.
    test_item = _held_out(user, item, test, o.encoding.user.size)
    by_user = _ids(np.arange(test_item.size, dtype=np.int64), u_lo)
    train = ~test
    jobs = {}
    if o.valid is not None:
        valid = to_numpy(o.valid)
        train &= ~valid
        valid_item = _held_out(user, item, valid, o.encoding.user.size)
        jobs["valid_rows"] = (out / VALID_DIR, by_user, _ids(valid_item, i_lo))
        jobs["valid_negative_rows"] = (
            out / VALID_NEGATIVES_DIR,
            _ids(to_numpy(o.valid_neg_user), u_lo),
            _ids(to_numpy(o.valid_neg_item), i_lo),
        )
    jobs.update(
        {
            "train_rows": (out / TRAIN_DIR, _ids(user[train], u_lo), _ids(item[train], i_lo)),
            "negative_rows": (
                out / NEGATIVES_DIR,
                _ids(to_numpy(o.neg_user), u_lo),
                _ids(to_numpy(o.neg_item), i_lo),
            ),
            "test_rows": (out / TEST_DIR, by_user, _ids(test_item, i_lo)),
        }
    )
    # Arrow encodes and compresses without the GIL: the datasets are written in parallel.
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(write_dataset, *job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


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
