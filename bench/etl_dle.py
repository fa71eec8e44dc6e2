"""A same-machine baseline: DLE's ``convert.py`` (PyTorch/Recommendation/NCF), timed like our ETL.

DLE prepares ML-20m with pandas and torch in one process. Its steps, in its order, as it does them:

1. ``pd.read_csv`` of ``ratings.csv``, timestamps turned into datetimes, columns renamed;
2. users with fewer than 20 ratings dropped by a per-user ``groupby(...).filter``;
3. user and item ids renumbered by ``pd.factorize`` (order of first appearance);
4. a sort by time, the rating and time columns dropped, duplicate pairs dropped;
5. test = each user's last row (``groupby.tail(1)``), train = the others (a per-user ``apply``);
6. the train and test pairs saved with ``torch.save``;
7. 100 evaluation negatives per user: a Python loop over users x negatives drawing torch random
   items and rejecting those in a Python set of the training pairs (so a negative may repeat,
   and may be the user's test item), saved with ``torch.save``.

Written here from that description (docs/FACTS.md names the file), with ``.cuda()`` a no-op: its
cost on this CPU, in the same run as ours, is what ``python -m ncf.bench.etl`` compares against.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

MIN_RATINGS = 20  # DLE's constant
DRAW_BATCH = 128 * 1024  # random items drawn at once by DLE's sampler


def convert(csv: Path, out: Path, negatives: int = 100, seed: int = 1) -> dict[str, float]:
    """Run the steps above on ``csv``, writing DLE's three ``.pt`` files into ``out``.

    Returns
    -------
    dict
        Seconds per step (``read``, ``filter``, ``factorize``, ``sort_dedup``, ``split``, ``save``,
        ``negatives``).
    """
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        seconds[name] = round(now - t, 3)
        t = now

    df = pd.read_csv(csv)
    df["timestamp"] = pd.to_datetime(df["timestamp"], unit="s")
    df = df.rename(columns={"userId": "user_id", "movieId": "item_id"})
    lap("read")
    df = df.groupby("user_id").filter(lambda g: len(g) >= MIN_RATINGS)
    lap("filter")
    df["user_id"] = pd.factorize(df["user_id"])[0]
    df["item_id"] = pd.factorize(df["item_id"])[0]
    lap("factorize")
    df = df.sort_values(by="timestamp").drop(columns=["rating", "timestamp"]).drop_duplicates()
    lap("sort_dedup")
    by_user = df.groupby("user_id", group_keys=False)
    test = by_user.tail(1).sort_values(by="user_id")
    train = by_user.apply(lambda g: g.iloc[:-1])
    lap("split")
    train_pairs = torch.from_numpy(train.values)
    torch.save(train_pairs, out / "train_ratings.pt")
    torch.save(torch.from_numpy(test.values), out / "test_ratings.pt")
    lap("save")
    torch.save(_negatives(train_pairs.numpy(), negatives), out / "test_negatives.pt")
    lap("negatives")
    return seconds


def _negatives(train: np.ndarray, n: int) -> torch.Tensor:
    """DLE's evaluation sampler: per user, ``n`` uniform items not in its training pairs."""
    n_users, n_items = int(train[:, 0].max()) + 1, int(train[:, 1].max()) + 1
    known = set((train[:, 0] * n_items + train[:, 1]).tolist())
    users = torch.arange(n_users).repeat_interleave(n).tolist()
    items = [-1] * len(users)
    pool: list[int] = []
    for k, u in enumerate(users):
        while True:
            if not pool:
                pool = torch.randint(0, n_items, (DRAW_BATCH,)).tolist()
            j = pool.pop()
            if u * n_items + j not in known:
                break
        items[k] = j
    return torch.tensor(items).reshape(-1, n)
