"""An ETL directory with a validation split, built by hand until `ncf etl --holdout valid,test` lands.

Same layout as tests/models/etl_data.py plus ``valid/`` (each user's second-latest interaction, taken
out of ``train/``) and ``valid_negatives/`` (drawn like the test negatives, same columns).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ncf.core import names
from tests.models.etl_data import RESERVED, write_etl_dir


def write_valid_etl_dir(frame: pd.DataFrame, out: Path, negatives: int = 20, seed: int = 0) -> Path:
    """``write_etl_dir`` of ``frame``, then its second-latest interaction per user moved to valid/."""
    write_etl_dir(frame, out, negatives, seed)
    rng = np.random.default_rng(seed + 1)
    frame = frame.drop_duplicates(["user", "item"]).sort_values(["user", "time"], kind="stable")
    n_items = int(frame.item.max()) + 1
    rest = frame.drop(frame.groupby("user").tail(1).index)
    valid = rest.groupby("user").tail(1)
    train = rest.drop(valid.index)
    negs = []
    for u, items in frame.groupby("user").item:
        pool = np.setdiff1d(np.arange(n_items), items.to_numpy())
        negs.append(
            np.column_stack((np.full(negatives, u), rng.choice(pool, negatives, replace=False)))
        )
    neg = np.concatenate(negs)
    tables = {
        names.TRAIN_DIR: (train.user.to_numpy(), train.item.to_numpy()),
        names.VALID_DIR: (valid.user.to_numpy(), valid.item.to_numpy()),
        names.VALID_NEGATIVES_DIR: (neg[:, 0], neg[:, 1]),
    }
    for sub, (u, i) in tables.items():
        (out / sub).mkdir(exist_ok=True)
        pd.DataFrame(
            {names.USER: u.astype(np.int64) + RESERVED, names.ITEM: i.astype(np.int64) + RESERVED}
        ).to_parquet(out / sub / "part_0.parquet", index=False)
    meta = json.loads((out / names.METADATA_FILE).read_text())
    meta["train_rows"] = len(train)
    (out / names.METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return out
