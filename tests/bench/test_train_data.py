"""bench/train_data.py splits synthetic ratings by the ETL's rules: the same train and test pairs
as a real ``ncf etl --engine pandas`` on the same ratings, duplicates, ties and small users
included, and the same evaluation negatives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ncf.bench.train_data import load, split
from ncf.core import names
from ncf.models.data import load_etl
from ncf.workflows.etl import EtlConfig, run_etl

MIN_RATINGS, NEGATIVES = 5, 4


def _ratings(seed: int = 3) -> pd.DataFrame:
    """40 users x 60 items, timestamps in a narrow range (many ties on a user's latest time),
    repeated (user, movie) pairs, and two users below MIN_RATINGS; raw ids not contiguous."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(40):
        n = 2 if u in (7, 21) else int(rng.integers(MIN_RATINGS, 20))
        items = rng.choice(60, size=n, replace=False)
        times = rng.integers(0, 4, size=n)  # ties everywhere
        rows += [
            (10 * u + 1, 100 + 3 * int(i), 4.0, int(t)) for i, t in zip(items, times, strict=True)
        ]
    frame = pd.DataFrame(rows, columns=list(names.RAW_COLUMNS))
    dup = frame.sample(n=15, random_state=seed).assign(timestamp=lambda d: d.timestamp + 1)
    return pd.concat([frame, dup], ignore_index=True).sample(frac=1, random_state=seed)


def _pairs(users, items) -> set[tuple[int, int]]:
    return set(zip(np.asarray(users).tolist(), np.asarray(items).tolist(), strict=True))


def test_split_equals_the_etl(tmp_path: Path) -> None:
    ratings = _ratings()
    csv = tmp_path / "ratings.csv"
    ratings.to_csv(csv, index=False)
    out = tmp_path / "etl"
    opts = EtlConfig(csv, out, NEGATIVES, MIN_RATINGS, engine="pandas", holdout="test")
    run_etl(opts)
    etl = load_etl(out)
    columns = {c: ratings[c].to_numpy() for c in names.RAW_COLUMNS}
    ours = split(columns, NEGATIVES, seed=opts.seed, min_ratings=MIN_RATINGS)
    assert (int(ours["num_users"]), int(ours["num_items"])) == (etl.num_users, etl.num_items)
    assert ours["test_users"].tolist() == etl.test_users.tolist()  # every user once, ascending
    assert ours["test_items"].tolist() == etl.test_items.tolist()
    assert _pairs(ours["train_users"], ours["train_items"]) == _pairs(
        etl.train_users, etl.train_items
    )
    assert ours["train_users"].size == etl.train_users.numel()  # no duplicate pair kept
    # the ETL's own draw: the same negatives, user by user
    assert ours["eval_negatives"].tolist() == etl.eval_negatives.tolist()


def test_cached_split_loads_as_etl_data(tmp_path: Path) -> None:
    from ncf.bench.train_data import synthetic

    path = synthetic(0.001, cache=tmp_path)
    data = load(path, torch.device("cpu"))
    assert data.test_users.numel() == data.num_users and data.eval_negatives.shape[1] == 100
    assert synthetic(0.001, cache=tmp_path) == path  # cached
