"""Read an ETL output directory (see docs/ARCHITECTURE.md) into tensors, with input checks.

Only pyarrow/numpy/torch: training also runs where NVTabular and Merlin are not installed.
Ids are stored as int32 (half the memory of int64; ``nn.Embedding`` takes int32 indices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from ncf.core import names, textfile
from ncf.core.digest import sha256_bytes

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
    valid_users, valid_items, valid_negatives
        The same for the validation split (``ncf etl --holdout valid,test``), or None.
    """

    train_users: torch.Tensor
    train_items: torch.Tensor
    test_users: torch.Tensor
    test_items: torch.Tensor
    eval_negatives: torch.Tensor
    metadata: dict
    metadata_sha256: str
    path: Path
    valid_users: torch.Tensor | None = None
    valid_items: torch.Tensor | None = None
    valid_negatives: torch.Tensor | None = None

    @property
    def has_valid(self) -> bool:
        return self.valid_users is not None

    def held_out(self, split: str) -> EtlData:
        """This data with ``split`` ("test" or "valid") in the ``test_*``/``eval_negatives`` fields,
        which evaluation reads; the valid fields are cleared so nothing else is reachable."""
        if split == "test":
            return self
        if split != "valid" or not self.has_valid:
            raise ValueError(f"{self.path}: no {split!r} split (ncf etl --holdout valid,test)")
        return replace(
            self,
            test_users=self.valid_users,
            test_items=self.valid_items,
            eval_negatives=self.valid_negatives,
            valid_users=None,
            valid_items=None,
            valid_negatives=None,
        )

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
    meta = textfile.parse_json(raw, path)
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}; regenerate it with `ncf etl`")
    schema = Path(etl_dir) / names.TRAIN_DIR / names.SCHEMA_FILE
    if schema.is_file():  # ETL outputs from before the schema have only metadata.json
        sizes = schema_cardinalities(schema)
        for key, column in (("num_users", names.USER), ("num_items", names.ITEM)):
            if int(meta[key]) != sizes[column]:
                raise ValueError(
                    f"{schema}: {column} has {sizes[column]} ids but {path} says {key}="
                    f"{meta[key]}; regenerate both with `ncf etl`"
                )
            meta[key] = sizes[column]  # the table sizes come from the schema
    for kind in ("user", "item"):
        lo, hi = (int(x) for x in meta[f"{kind}_id_range"])
        n = int(meta[f"num_{kind}s"])
        if not 0 <= lo < hi <= n:
            raise ValueError(
                f"{path}: {kind}_id_range {[lo, hi]} is not inside [0, num_{kind}s={n}]; "
                "regenerate it with `ncf etl`"
            )
    return meta, sha256_bytes(raw)


def schema_cardinalities(path: Path) -> dict[str, int]:
    """Ids each column's embedding table must hold, from a dataset's Merlin schema
    (``.merlin/schema.json``): its ``intDomain`` max + 1 (the ETL writes ``[0, cardinality - 1]``;
    ``ncf.workflows.schema``).

    Read as JSON: training does not import Merlin. Raises ValueError naming the file when the
    user or item column, or its domain, is missing.
    """
    doc = textfile.read_json(path)
    features = doc.get("feature", []) if isinstance(doc, dict) else []
    sizes = {}
    for f in features:
        domain = f.get("intDomain", {}) if isinstance(f, dict) else {}
        if "name" in f and "max" in domain:
            sizes[f["name"]] = int(domain["max"]) + 1
    missing = [c for c in (names.USER, names.ITEM) if c not in sizes]
    if missing:
        raise ValueError(f"{path}: no intDomain max for {missing}; regenerate it with `ncf etl`")
    return sizes


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def read_pairs(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(user_id, item_id)`` int64 arrays of every ``*.parquet`` file in ``folder``, by user.

    The files are read in natural order and the rows put in ``user_id`` order by a stable sort
    (each user's rows keep their order): the ETL writes one file per partition of users, each
    sorted by user, so every partitioning reads as the same rows (docs/ARCHITECTURE.md).
    """
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
    user, item = np.concatenate(users), np.concatenate(items)
    if user.size > 1 and (user[1:] < user[:-1]).any():
        order = np.argsort(user, kind="stable")
        user, item = user[order], item[order]
    return user, item


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
    neg_users: np.ndarray,
    neg_items: np.ndarray,
    test_users: np.ndarray,
    n: int,
    where: Path,
    split: str = names.TEST_DIR,
) -> np.ndarray:
    """Negatives as ``[U, n]`` aligned with the sorted ``test_users``; checks the per-user counts."""
    if neg_users.size != test_users.size * n:
        raise ValueError(
            f"{where}: {neg_users.size} rows, expected {test_users.size} {split} users x "
            f"negatives_per_user={n} = {test_users.size * n}; rerun `ncf etl`"
        )
    order = np.argsort(neg_users, kind="stable")  # keeps each user's draw order
    grouped = neg_users[order].reshape(test_users.size, n) if n else neg_users.reshape(-1, 0)
    bad = np.flatnonzero((grouped != test_users[:, None]).any(axis=1)) if n else []
    if len(bad):
        u = int(bad[0])
        raise ValueError(
            f"{where}: {split} user {int(test_users[u])} does not have exactly {n} negatives "
            f"({where.name}/ and {split}/ disagree); rerun `ncf etl`"
        )
    return neg_items[order].reshape(test_users.size, n)


def _read_held_out(
    root: Path, split: str, neg_dir: str, meta: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Users (sorted), items ``[U]`` and negatives ``[U, N]`` of one held-out split, checked."""
    n_users, (lo, hi) = int(meta["num_users"]), (int(x) for x in meta["item_id_range"])
    users, items = read_pairs(root / split)
    ng_u, ng_i = read_pairs(root / neg_dir)
    for folder, u, i in ((split, users, items), (neg_dir, ng_u, ng_i)):
        check_range(u, 0, n_users, root / folder, names.USER)
        check_range(i, lo, hi, root / folder, names.ITEM)
    order = np.argsort(users, kind="stable")
    users, items = users[order], items[order]
    dup = np.flatnonzero(users[1:] == users[:-1])
    if dup.size:
        raise ValueError(
            f"{root / split}: user {int(users[dup[0]])} has several {split} rows; expected one"
        )
    negs = _eval_negatives(
        ng_u, ng_i, users, int(meta["negatives_per_user"]), root / neg_dir, split
    )
    clash = np.flatnonzero((negs == items[:, None]).any(axis=1))
    if clash.size:
        raise ValueError(
            f"{root / neg_dir}: user {int(users[clash[0]])} has its {split} item "
            f"{int(items[clash[0]])} among its negatives; rerun `ncf etl`"
        )
    return users, items, negs


def _check_valid_against_test(root: Path, valid: tuple, test: tuple) -> None:
    """Same users in both splits; per user, two different items, neither among the other's negatives."""
    (vu, vi, vn), (tu, ti, tn) = valid, test
    if vu.shape != tu.shape or (vu != tu).any():
        raise ValueError(
            f"{root / names.VALID_DIR} and {root / names.TEST_DIR} hold different users; rerun `ncf etl`"
        )
    bad = np.flatnonzero(
        (vi == ti) | (vn == ti[:, None]).any(axis=1) | (tn == vi[:, None]).any(axis=1)
    )
    if bad.size:
        raise ValueError(
            f"{root}: user {int(vu[bad[0]])} has its valid item {int(vi[bad[0]])} and test item "
            f"{int(ti[bad[0]])} equal, or one among the other split's negatives; rerun `ncf etl`"
        )


def load_etl(etl_dir: str | Path, device: torch.device | str = "cpu") -> EtlData:
    """Read and check an ETL output directory.

    Parameters
    ----------
    etl_dir
        Directory written by ``ncf etl`` (``train/``, ``test/``, ``negatives/``, ``metadata.json``,
        and ``valid/``, ``valid_negatives/`` when it was run with ``--holdout valid,test``).
    device
        Where the returned tensors live (training samples negatives on this device).

    Returns
    -------
    EtlData
        int32 tensors; test users sorted, ``eval_negatives[u]`` belongs to ``test_users[u]``; the
        valid tensors are None without ``valid/``.
    """
    root = Path(etl_dir)
    meta, sha = read_metadata(root)
    tr_u, tr_i = read_pairs(root / names.TRAIN_DIR)
    check_range(tr_u, 0, int(meta["num_users"]), root / names.TRAIN_DIR, names.USER)
    check_range(tr_i, *(int(x) for x in meta["item_id_range"]), root / names.TRAIN_DIR, names.ITEM)
    test = _read_held_out(root, names.TEST_DIR, names.NEGATIVES_DIR, meta)
    t = {"train_users": tr_u, "train_items": tr_i}
    t.update(zip(("test_users", "test_items", "eval_negatives"), test, strict=True))
    if (root / names.VALID_DIR).exists():
        valid = _read_held_out(root, names.VALID_DIR, names.VALID_NEGATIVES_DIR, meta)
        _check_valid_against_test(root, valid, test)
        t.update(zip(("valid_users", "valid_items", "valid_negatives"), valid, strict=True))
    elif meta.get("holdout", "test") != "test":
        raise ValueError(
            f"{root / names.VALID_DIR}: missing, but metadata.json says holdout "
            f"{meta['holdout']!r}; rerun `ncf etl`"
        )
    tensors = {k: torch.from_numpy(v.astype(np.int32)).to(device) for k, v in t.items()}
    return EtlData(**tensors, metadata=meta, metadata_sha256=sha, path=root)
