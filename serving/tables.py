"""Lookup tables the serving models need, read from an ETL output directory.

- ``vocab_tables``: the saved NVTabular Workflow's Categorify vocabularies as sorted raw ids and
  their codes (``np.searchsorted`` at serving time), plus the out-of-vocabulary code.
- ``seen_tables``: every user's known positives (``train/`` and ``test/``) as CSR arrays by model id,
  so that ``recommend`` can exclude the items a user already rated.
- ``popularity_tables``: the catalogue ranked by how many users rated each item in ``train/``, what
  ``recommend`` answers for users outside the vocabulary (cold start).

Categorify (NVTabular 23.08) writes ``workflow/categories/unique.<column>.parquet`` whose pandas
index is the code of each raw value; codes 0, 1, 2 are reserved for padding, nulls and
out-of-vocabulary values (``nvtabular.ops.categorify.OOV_OFFSET``). A test checks these tables
against ``Workflow.transform`` on the same ids.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ncf.core import names
from ncf.models.data import check_range, read_pairs

# Categorify's code for values not seen at fit time (nvtabular.ops.categorify.OOV_OFFSET).
CATEGORIFY_OOV = 2


def _vocab_path(etl_dir: Path, meta: dict, kind: str, column: str) -> Path:
    """Path of Categorify's unique-values parquet for ``column`` (metadata ``vocab`` or default)."""
    vocab = meta.get("vocab") or {}
    rel = vocab.get(kind) or vocab.get(column)
    candidates = [etl_dir / rel, etl_dir / names.WORKFLOW_DIR / rel] if rel else []
    candidates.append(etl_dir / names.WORKFLOW_DIR / "categories" / f"unique.{column}.parquet")
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"no Categorify vocabulary for {column} in {etl_dir} (looked at "
        f"{', '.join(map(str, candidates))}); re-run `ncf etl` to save the workflow"
    )


def _column_vocab(path: Path, column: str, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw ids ascending, their codes) from one unique-values parquet; codes checked."""
    frame = pd.read_parquet(path)
    if column not in frame.columns:
        raise ValueError(f"{path}: no column {column!r} (columns {list(frame.columns)})")
    frame = frame[frame[column].notna()]  # a null row, if any, is Categorify's reserved null code
    raw = frame[column].to_numpy().astype(np.int64)
    codes = frame.index.to_numpy().astype(np.int64)
    order = np.argsort(raw, kind="stable")
    raw, codes = raw[order], codes[order]
    if raw.size == 0 or np.any(np.diff(raw) == 0):
        raise ValueError(f"{path}: {column} vocabulary is empty or has duplicate raw ids")
    if (
        codes.min() <= CATEGORIFY_OOV
        or codes.max() >= n_codes
        or np.unique(codes).size != codes.size
    ):
        raise ValueError(
            f"{path}: codes of {column} must be unique and in ({CATEGORIFY_OOV}, {n_codes}) "
            f"(got {codes.min()}..{codes.max()}); metadata.json and the workflow disagree: "
            "re-run `ncf etl`"
        )
    return raw, codes


def vocab_tables(etl_dir: str | os.PathLike, meta: dict) -> dict[str, np.ndarray]:
    """Arrays of ``vocab.npz``: ``{user,item}_raw`` (ascending), ``{user,item}_code``, ``*_oov``."""
    etl_dir = Path(etl_dir)
    out: dict[str, np.ndarray] = {}
    for kind, column, n in (
        ("user", names.RAW_USER, meta["num_users"]),
        ("item", names.RAW_ITEM, meta["num_items"]),
    ):
        raw, codes = _column_vocab(_vocab_path(etl_dir, meta, kind, column), column, n)
        out[f"{kind}_raw"], out[f"{kind}_code"] = raw, codes
        out[f"{kind}_oov"] = np.array(CATEGORIFY_OOV, dtype=np.int64)
    return out


def seen_tables(etl_dir: str | os.PathLike, meta: dict) -> dict[str, np.ndarray]:
    """Arrays of ``seen.npz``: CSR ``indptr [num_users + 1]`` and ``indices`` (item ids, sorted).

    Every known positive of a user (``train/``, ``valid/`` where the ETL holds one, ``test/``) is
    "already rated".
    """
    etl_dir = Path(etl_dir)
    parts = []
    splits = (names.TRAIN_DIR, names.VALID_DIR, names.TEST_DIR)
    for split in (s for s in splits if s != names.VALID_DIR or (etl_dir / s).is_dir()):
        users, items = read_pairs(etl_dir / split)
        check_range(users, 0, meta["num_users"], etl_dir / split, names.USER)
        check_range(items, 0, meta["num_items"], etl_dir / split, names.ITEM)
        parts.append((users, items))
    users = np.concatenate([p[0] for p in parts])
    items = np.concatenate([p[1] for p in parts])
    # One int64 key per pair sorts by user, then item, and np.unique drops duplicates.
    keys = np.unique(users * meta["num_items"] + items)
    users, items = keys // meta["num_items"], keys % meta["num_items"]
    indptr = np.zeros(meta["num_users"] + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=meta["num_users"]), out=indptr[1:])
    return {"indptr": indptr, "indices": items}


def popularity_tables(etl_dir: str | os.PathLike, meta: dict) -> dict[str, np.ndarray]:
    """Arrays of ``popularity.npz``: the catalogue (``item_id_range``) ranked by training users.

    ``items``: item model ids, most rated first (ties: lower id first); ``share``: float32, the
    fraction of training users who rated each (the score ``recommend`` returns for them). Only
    ``train/`` counts: the held-out test item stays unseen, as in evaluation.
    """
    etl_dir = Path(etl_dir)
    users, items = read_pairs(etl_dir / names.TRAIN_DIR)
    check_range(items, 0, meta["num_items"], etl_dir / names.TRAIN_DIR, names.ITEM)
    lo, hi = meta["item_id_range"]
    counts = np.bincount(items, minlength=meta["num_items"])[lo:hi].astype(np.int64)
    ids = np.arange(lo, hi, dtype=np.int64)
    order = np.lexsort((ids, -counts))  # count descending, then id ascending
    n_users = max(int(np.unique(users).size), 1)
    return {"items": ids[order], "share": (counts[order] / n_users).astype(np.float32)}
