"""Read an ETL output directory (see docs/ARCHITECTURE.md) into tensors, with input checks.

Only pyarrow/numpy/torch: training also runs where NVTabular and Merlin are not installed.
Ids are stored as int32 (half the memory of int64; ``nn.Embedding`` takes int32 indices).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from ncf import names
from ncf.digest import sha256_bytes

REQUIRED_KEYS = (
    "num_users",
    "num_items",
    "user_id_range",
    "item_id_range",
    "negatives_per_user",
)


@dataclass
class EtlData:
    """One ETL split as tensors (all on one device).

    Attributes
    ----------
    train_users, train_items
        int32 ``[P]`` training positives.
    test_users, test_items
        int32 ``[U]`` one held-out positive per test user, sorted by user.
    eval_negatives
        int32 ``[U, N]`` the ETL's cached evaluation negatives of each test user.
    """

    train_users: torch.Tensor
    train_items: torch.Tensor
    test_users: torch.Tensor
    test_items: torch.Tensor
    eval_negatives: torch.Tensor
    metadata: dict
    metadata_sha256: str
    path: Path

    @property
    def num_users(self) -> int:
        return int(self.metadata["num_users"])

    @property
    def num_items(self) -> int:
        return int(self.metadata["num_items"])

    @property
    def item_range(self) -> tuple[int, int]:
        lo, hi = self.metadata["item_id_range"]
        return int(lo), int(hi)


def read_metadata(etl_dir: str | Path) -> tuple[dict, str]:
    """``metadata.json`` of an ETL directory and the sha256 of its bytes; checks the keys used here."""
    path = Path(etl_dir) / names.METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no ETL metadata; run `ncf etl --input RATINGS --out {etl_dir}` first"
        )
    raw = path.read_bytes()
    meta = json.loads(raw)
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}; regenerate it with `ncf etl`")
    for kind in ("user", "item"):
        lo, hi = (int(x) for x in meta[f"{kind}_id_range"])
        n = int(meta[f"num_{kind}s"])
        if not 0 <= lo < hi <= n:
            raise ValueError(
                f"{path}: {kind}_id_range {[lo, hi]} is not inside [0, num_{kind}s={n}]; "
                "regenerate it with `ncf etl`"
            )
    return meta, sha256_bytes(raw)


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def read_pairs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(user_id, item_id)`` int64 arrays of every ``*.parquet`` file in ``folder`` (natural order)."""
    files = sorted(folder.glob("*.parquet"), key=_natural_key)
    if not files:
        raise FileNotFoundError(
            f"{folder}: no parquet files; is this an `ncf etl` output directory?"
        )
    users, items = [], []
    for f in files:
        table = pq.read_table(f)
        for col in (names.USER, names.ITEM):
            if col not in table.column_names:
                raise ValueError(
                    f"{f}: no column {col!r} (has {table.column_names}); regenerate with `ncf etl`"
                )
        users.append(table.column(names.USER).to_numpy().astype(np.int64, copy=False))
        items.append(table.column(names.ITEM).to_numpy().astype(np.int64, copy=False))
    return np.concatenate(users), np.concatenate(items)


def check_range(values: np.ndarray, lo: int, hi: int, where: Path, column: str) -> None:
    """Raise ValueError naming the first row of ``values`` outside ``[lo, hi)``."""
    bad = np.flatnonzero((values < lo) | (values >= hi))
    if bad.size:
        row = int(bad[0])
        raise ValueError(
            f"{where}: row {row} {column}={int(values[row])} is outside [{lo}, {hi}) from metadata.json "
            f"({bad.size} such rows); rerun `ncf etl` so data and metadata match"
        )


def _eval_negatives(
    neg_users: np.ndarray, neg_items: np.ndarray, test_users: np.ndarray, n: int, where: Path
) -> np.ndarray:
    """Negatives as ``[U, n]`` aligned with the sorted ``test_users``; checks the per-user counts."""
    if neg_users.size != test_users.size * n:
        raise ValueError(
            f"{where}: {neg_users.size} rows, expected {test_users.size} test users x "
            f"negatives_per_user={n} = {test_users.size * n}; rerun `ncf etl`"
        )
    order = np.argsort(neg_users, kind="stable")  # keeps each user's draw order
    grouped = neg_users[order].reshape(test_users.size, n) if n else neg_users.reshape(-1, 0)
    bad = np.flatnonzero((grouped != test_users[:, None]).any(axis=1)) if n else []
    if len(bad):
        u = int(bad[0])
        raise ValueError(
            f"{where}: test user {int(test_users[u])} does not have exactly {n} negatives "
            "(negatives/ and test/ disagree); rerun `ncf etl`"
        )
    return neg_items[order].reshape(test_users.size, n)


def load_etl(etl_dir: str | Path, device: torch.device | str = "cpu") -> EtlData:
    """Read and check an ETL output directory.

    Parameters
    ----------
    etl_dir
        Directory written by ``ncf etl`` (``train/``, ``test/``, ``negatives/``, ``metadata.json``).
    device
        Where the returned tensors live (training samples negatives on this device).

    Returns
    -------
    EtlData
        int32 tensors; test users sorted, ``eval_negatives[u]`` belongs to ``test_users[u]``.
    """
    root = Path(etl_dir)
    meta, sha = read_metadata(root)
    n_users, (lo, hi) = int(meta["num_users"]), (int(x) for x in meta["item_id_range"])
    n_neg = int(meta["negatives_per_user"])
    tr_u, tr_i = read_pairs(root / names.TRAIN_DIR)
    te_u, te_i = read_pairs(root / names.TEST_DIR)
    ng_u, ng_i = read_pairs(root / names.NEGATIVES_DIR)
    for folder, u, i in (
        (names.TRAIN_DIR, tr_u, tr_i),
        (names.TEST_DIR, te_u, te_i),
        (names.NEGATIVES_DIR, ng_u, ng_i),
    ):
        check_range(u, 0, n_users, root / folder, names.USER)
        check_range(i, lo, hi, root / folder, names.ITEM)
    order = np.argsort(te_u, kind="stable")
    te_u, te_i = te_u[order], te_i[order]
    dup = np.flatnonzero(te_u[1:] == te_u[:-1])
    if dup.size:
        raise ValueError(
            f"{root / names.TEST_DIR}: user {int(te_u[dup[0]])} has several test rows; expected one"
        )
    negs = _eval_negatives(ng_u, ng_i, te_u, n_neg, root / names.NEGATIVES_DIR)
    clash = np.flatnonzero((negs == te_i[:, None]).any(axis=1))
    if clash.size:
        raise ValueError(
            f"{root / names.NEGATIVES_DIR}: user {int(te_u[clash[0]])} has its test item "
            f"{int(te_i[clash[0]])} among its negatives; rerun `ncf etl`"
        )
    t = {
        "train_users": tr_u,
        "train_items": tr_i,
        "test_users": te_u,
        "test_items": te_i,
        "eval_negatives": negs,
    }
    tensors = {k: torch.from_numpy(v.astype(np.int32)).to(device) for k, v in t.items()}
    return EtlData(**tensors, metadata=meta, metadata_sha256=sha, path=root)
