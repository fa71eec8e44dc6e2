"""Lookup tables the serving models need, read from an ETL output directory.

- ``vocab_tables``: the saved NVTabular Workflow's Categorify vocabularies as sorted raw ids and
  their codes (``np.searchsorted`` at serving time), plus the out-of-vocabulary code.
- ``seen_tables``: every user's known positives (``train/`` and ``test/``) as CSR arrays by model id,
  so that ``recommend`` can exclude the items a user already rated.

Categorify (NVTabular 23.08) writes ``workflow/categories/unique.<column>.parquet`` whose pandas
index is the code of each raw value; codes 0, 1, 2 are reserved for padding, nulls and
out-of-vocabulary values (``nvtabular.ops.categorify.OOV_OFFSET``). A test checks these tables
against ``Workflow.transform`` on the same ids.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ncf import names

# Categorify's code for values not seen at fit time (nvtabular.ops.categorify.OOV_OFFSET).
CATEGORIFY_OOV = 2
_REQUIRED_META = ("num_users", "num_items", "user_id_range", "item_id_range")


def read_metadata(etl_dir: str | os.PathLike) -> dict:
    """The ETL's ``metadata.json``, checked for the keys serving relies on.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing file or keys, or ranges outside ``[0, num_*)``.
    """
    path = Path(etl_dir) / names.METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass --data the output directory of `ncf etl`")
    meta = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in _REQUIRED_META if k not in meta]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}; re-run `ncf etl` to rewrite it")
    for kind, n in (("user", meta["num_users"]), ("item", meta["num_items"])):
        lo, hi = meta[f"{kind}_id_range"]
        if not 0 <= lo < hi <= n:
            raise ValueError(
                f"{path}: {kind}_id_range={[lo, hi]} is not inside [0, num_{kind}s={n}]; "
                "re-run `ncf etl`"
            )
    return meta


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


def _read_pairs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: pass --data the output directory of `ncf etl`")
    table = pq.read_table(path, columns=[names.USER, names.ITEM])
    return (
        table.column(names.USER).to_numpy().astype(np.int64),
        table.column(names.ITEM).to_numpy().astype(np.int64),
    )


def seen_tables(etl_dir: str | os.PathLike, meta: dict) -> dict[str, np.ndarray]:
    """Arrays of ``seen.npz``: CSR ``indptr [num_users + 1]`` and ``indices`` (item ids, sorted).

    Every known positive of a user (``train/`` and ``test/``) is "already rated".
    """
    etl_dir = Path(etl_dir)
    parts = [_read_pairs(etl_dir / d) for d in (names.TRAIN_DIR, names.TEST_DIR)]
    users = np.concatenate([p[0] for p in parts])
    items = np.concatenate([p[1] for p in parts])
    for col, ids, n in (
        (names.USER, users, meta["num_users"]),
        (names.ITEM, items, meta["num_items"]),
    ):
        bad = np.flatnonzero((ids < 0) | (ids >= n))
        if bad.size:
            raise ValueError(
                f"{etl_dir}: {col}={ids[bad[0]]} outside [0, {n}) in train/ or test/; "
                "metadata.json does not match the data: re-run `ncf etl`"
            )
    # One int64 key per pair sorts by user, then item, and np.unique drops duplicates.
    keys = np.unique(users * meta["num_items"] + items)
    users, items = keys // meta["num_items"], keys % meta["num_items"]
    indptr = np.zeros(meta["num_users"] + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=meta["num_users"]), out=indptr[1:])
    return {"indptr": indptr, "indices": items}
