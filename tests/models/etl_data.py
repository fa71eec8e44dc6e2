"""Small ETL output directories in the format of docs/ARCHITECTURE.md, for the training tests.

Built with numpy/pandas by simple means (leave-one-out by time, exact evaluation negatives by a
per-user set difference), so the training tests do not depend on `ncf etl` or NVTabular.
Low ids 0..RESERVED-1 are unused, as Categorify reserves them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ncf.core import names

RESERVED = 3


def planted_ratings(
    n_users: int = 120, n_items: int = 80, per_user: int = 12, clusters: int = 4, seed: int = 0
) -> pd.DataFrame:
    """Interactions with planted structure: a user takes 85% of its items from its own cluster."""
    rng = np.random.default_rng(seed)
    user_cluster = rng.integers(0, clusters, n_users)
    item_cluster = np.arange(n_items) % clusters
    rows = []
    for u in range(n_users):
        own = np.flatnonzero(item_cluster == user_cluster[u])
        other = np.flatnonzero(item_cluster != user_cluster[u])
        n_own = int(round(per_user * 0.85))
        picks = np.concatenate(
            (
                rng.choice(own, n_own, replace=False),
                rng.choice(other, per_user - n_own, replace=False),
            )
        )
        rows += [(u, int(i), t) for t, i in enumerate(rng.permutation(picks))]
    return pd.DataFrame(rows, columns=["user", "item", "time"])


def write_etl_dir(frame: pd.DataFrame, out: Path, negatives: int = 20, seed: int = 0) -> Path:
    """Write ``frame`` (columns user, item, time; ids from 0) as an ETL output directory.

    The latest interaction of each user is its test item; its evaluation negatives are drawn
    uniformly without replacement from the items it never interacted with.
    """
    rng = np.random.default_rng(seed)
    frame = frame.drop_duplicates(["user", "item"]).sort_values(["user", "time"], kind="stable")
    n_users, n_items = int(frame.user.max()) + 1, int(frame.item.max()) + 1
    last = frame.groupby("user").tail(1)
    train = frame.drop(last.index)
    neg_rows = []
    for u, items in frame.groupby("user").item:
        pool = np.setdiff1d(np.arange(n_items), items.to_numpy())
        neg_rows.append(
            np.column_stack((np.full(negatives, u), rng.choice(pool, negatives, replace=False)))
        )
    negs = np.concatenate(neg_rows)
    out.mkdir(parents=True, exist_ok=True)
    tables = {
        names.TRAIN_DIR: (train.user.to_numpy(), train.item.to_numpy()),
        names.TEST_DIR: (last.user.to_numpy(), last.item.to_numpy()),
        names.NEGATIVES_DIR: (negs[:, 0], negs[:, 1]),
    }
    for sub, (u, i) in tables.items():
        (out / sub).mkdir(exist_ok=True)
        pd.DataFrame(
            {names.USER: u.astype(np.int64) + RESERVED, names.ITEM: i.astype(np.int64) + RESERVED}
        ).to_parquet(out / sub / "part_0.parquet", index=False)
    meta = {
        "num_users": n_users + RESERVED,
        "num_items": n_items + RESERVED,
        "user_id_range": [RESERVED, n_users + RESERVED],
        "item_id_range": [RESERVED, n_items + RESERVED],
        "n_users": n_users,
        "n_items": n_items,
        "train_rows": len(train),
        "test_rows": len(last),
        "negative_rows": len(negs),
        "negatives_per_user": negatives,
        "seed": seed,
    }
    (out / names.METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return out


def synth_ratings(scale: float, seed: int = 1) -> pd.DataFrame:
    """``ncf synth`` data at ``scale`` as (user, item, time) with contiguous ids from 0."""
    from ncf.sources.synth import SynthConfig, generate

    columns = generate(SynthConfig(scale=scale, seed=seed))
    return pd.DataFrame(
        {
            "user": pd.factorize(columns[names.RAW_USER])[0],
            "item": pd.factorize(columns[names.RAW_ITEM])[0],
            "time": columns[names.RAW_TIME],
        }
    )


def ratings_frame(path: Path) -> pd.DataFrame:
    """A MovieLens ratings.csv as (user, item, time) with contiguous ids from 0."""
    raw = pd.read_csv(path)
    return pd.DataFrame(
        {
            "user": pd.factorize(raw[names.RAW_USER])[0],
            "item": pd.factorize(raw[names.RAW_ITEM])[0],
            "time": raw[names.RAW_TIME],
        }
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
