"""Shared helpers of the ETL tests: run the ETL, read its outputs, write small ratings files."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ncf.core.names import ITEM, METADATA_FILE, NEGATIVES_DIR, TEST_DIR, TRAIN_DIR, USER
from ncf.workflows.etl import EtlConfig, run_etl

REPO = Path(__file__).resolve().parents[2]
# Hosts without Merlin (e.g. the lent GPU box) run only the --engine pandas tests.
needs_nvtabular = pytest.mark.skipif(
    find_spec("nvtabular") is None, reason="NVTabular not installed"
)
SMALL = REPO / "data" / "ml-latest-small" / "ratings.csv"


def etl(inp: Path, out: Path, **kw) -> dict:
    """Run the ETL in this process and return its metadata."""
    return run_etl(EtlConfig(input=inp, out=out, **kw))


def read(out: Path, name: str) -> pd.DataFrame:
    """One output dataset as a pandas frame (checks the int64 contract)."""
    table = pq.read_table(out / name)
    assert table.column_names == [USER, ITEM]
    assert all(str(t) == "int64" for t in table.schema.types)
    return table.to_pandas()


def outputs(out: Path) -> dict[str, pd.DataFrame]:
    return {name: read(out, name) for name in (TRAIN_DIR, TEST_DIR, NEGATIVES_DIR)}


def metadata(out: Path) -> dict:
    return json.loads((out / METADATA_FILE).read_text())


def write_synthetic(path: Path, n_users: int, n_items: int, per_user: int, seed: int = 0) -> Path:
    """A ratings.csv with ``per_user`` distinct items per user (no duplicates)."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(1, n_users + 1), per_user)
    items = (
        np.concatenate([rng.choice(n_items, per_user, replace=False) for _ in range(n_users)]) * 3
        + 1
    )
    times = rng.integers(10**9, 10**9 + 10**6, users.size)
    frame = pd.DataFrame({"userId": users, "movieId": items, "rating": 4.0, "timestamp": times})
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.sample(frac=1.0, random_state=seed).to_csv(path, index=False)
    return path
