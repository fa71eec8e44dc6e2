"""``ncf synth --format parquet``: the same generator, streamed over blocks of users.

The CSV path (``synth.generate``) holds the whole table in memory (about 60 bytes per rating at
its peak). This one draws the table block by block so that memory stays bounded at any scale:

- Drawn once, exactly as ``generate`` draws them (the same random stream, so equal for a seed):
  the ratings per user, the catalogue (movieIds, popularity, genres) and the users' tastes.
- Blocks: consecutive users (``_chunks`` of the counts) holding about ``block_ratings`` ratings
  (one user more than that where a single user does). Block ``b`` draws from its own stream,
  ``default_rng([seed, 1, b])``: its items (``sample_all`` on the block's users), their time order
  and timestamps, and its rating values (``ratings`` with the per-item quality and per-user bias
  drawn once from ``default_rng([seed, 0])``; the value proportions are ML-20m's exactly within
  each block, to one rating per value).
- The tail (the last blocks, together at least ``block_ratings`` ratings or all of them) is held
  until the end: items no block drew get one rating each from its rows of popular items
  (``cover_items``, counting the rows already written), then its ratings are drawn and it is
  written. The first block's earliest timestamp is set to ``TIME_MIN`` and the tail's latest to
  ``TIME_MAX`` (each is its user's first or last rating, so no order changes).

Rows come out sorted by (userId, movieId), as ``ratings.csv``. Equal to the CSV output of the same
config: the users and each user's number of ratings, the set of movieIds (every item is rated),
the first and last timestamps. Drawn the same way but from other streams (so different rows): the
items each user rated, their order, timestamps and rating values. The rows depend on
``block_ratings`` (blocks own streams); the part files (``part_ratings``) do not change them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ncf.core import names
from ncf.core.config import write_config
from ncf.sources import parts
from ncf.sources.synth import (
    TIME_MAX,
    TIME_MIN,
    Catalogue,
    SynthConfig,
    Tastes,
    _chunks,
    catalogue,
    cover_items,
    gini,
    rating_terms,
    ratings,
    sample_all,
    sizes,
    tastes,
    user_counts,
)


@dataclass
class _Drawn:
    """One block's rows before their rating values: user-major, each user's rows in time order."""

    rng: np.random.Generator
    user: np.ndarray  # [n] int32 user index
    item: np.ndarray  # [n] int32 item index
    ts: np.ndarray  # [n] int64


def tail_start(sizes_: np.ndarray, budget: int) -> int:
    """Index of the first block of the tail: the shortest suffix of blocks (``sizes_`` rows each)
    holding at least ``budget`` rows, or every block."""
    from_end = np.cumsum(sizes_[::-1])
    enough = np.flatnonzero(from_end >= budget)
    return int(sizes_.size - 1 - enough[0]) if enough.size else 0


def generate_blocks(cfg: SynthConfig) -> Iterator[dict[str, np.ndarray]]:
    """Yield the table block by block: columns of ``ncf.core.names.RAW_COLUMNS`` (userId int32
    from 1, movieId int32, rating float32, timestamp int64), sorted by (userId, movieId).

    Holds at most one block, or the tail (under ``2 * block_ratings`` rows plus one user), at a
    time; deterministic for a given ``cfg``.
    """
    rng = np.random.default_rng(cfg.seed)
    sz = sizes(cfg.scale, cfg.items)
    counts = user_counts(rng, cfg, sz)  # the draws of `generate`, in its order
    cat = catalogue(rng, cfg, sz.items)
    ta = tastes(rng, cfg, cat, sz.users)
    terms = rating_terms(np.random.default_rng([cfg.seed, 0]), cat, sz.users)
    blocks = list(_chunks(counts, cfg.block_ratings))
    tail = tail_start(np.array([counts[b].sum() for b in blocks]), cfg.block_ratings)
    seen = np.zeros(sz.items, np.int64)  # ratings per item in the blocks already yielded
    held: list[_Drawn] = []
    for b, users in enumerate(blocks):
        block_rng = np.random.default_rng([cfg.seed, 1, b])
        user, item, ts = sample_all(
            block_rng, cat, ta, counts, cfg.drift, np.arange(users.start, users.stop)
        )
        if b == 0:
            ts[np.argmin(ts)] = TIME_MIN
        drawn = _Drawn(block_rng, user, item, ts)
        if b < tail:
            seen += np.bincount(item, minlength=sz.items)
            yield _columns(drawn, cat, ta, terms)
        else:
            held.append(drawn)
    yield from _finish_tail(held, seen, cat, ta, terms)


def _finish_tail(
    held: list[_Drawn], seen: np.ndarray, cat: Catalogue, ta: Tastes, terms: tuple
) -> Iterator[dict[str, np.ndarray]]:
    """Cover the items no block drew with rows of the tail, stamp ``TIME_MAX``, yield the tail."""
    item = np.concatenate([d.item for d in held])
    cover_items(held[-1].rng, item, seen.size, prior=seen)
    ends = np.cumsum([d.item.size for d in held])
    for d, piece in zip(held, np.split(item, ends[:-1]), strict=True):
        d.item = piece
    last = max(held, key=lambda d: d.ts.max())
    last.ts[np.argmax(last.ts)] = TIME_MAX
    for d in held:
        yield _columns(d, cat, ta, terms)


def _columns(d: _Drawn, cat: Catalogue, ta: Tastes, terms: tuple) -> dict[str, np.ndarray]:
    """The block's ratings drawn, its rows sorted by (user, item), as the raw columns."""
    rating = ratings(d.rng, cat, ta, d.user, d.item, terms)
    order = np.argsort(d.user.astype(np.int64) * cat.w.size + d.item)
    return {
        names.RAW_USER: d.user[order] + np.int32(1),
        names.RAW_ITEM: cat.raw_ids.astype(np.int32)[d.item[order]],
        names.RAW_RATING: rating[order],
        names.RAW_TIME: d.ts[order],
    }


class Tally:
    """``synth.summary``'s statistics, gathered block by block (blocks hold whole users)."""

    def __init__(self) -> None:
        self.per_user: list[np.ndarray] = []  # ratings per user, block by block
        self.per_item = np.zeros(0, np.int64)  # ratings per raw movieId
        self.time = (np.iinfo(np.int64).max, np.iinfo(np.int64).min)

    def add(self, block: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Count ``block`` and return it unchanged (``map(tally.add, blocks)``)."""
        self.per_user.append(np.unique(block[names.RAW_USER], return_counts=True)[1])
        items = np.bincount(block[names.RAW_ITEM])
        if items.size > self.per_item.size:
            self.per_item = np.concatenate(
                [self.per_item, np.zeros(items.size - self.per_item.size, np.int64)]
            )
        self.per_item[: items.size] += items
        ts = block[names.RAW_TIME]
        self.time = (min(self.time[0], int(ts.min())), max(self.time[1], int(ts.max())))
        return block

    def summary(self) -> dict[str, float]:
        per_user = np.concatenate(self.per_user)
        per_item = self.per_item[self.per_item > 0]
        return {
            "ratings": int(per_user.sum()),
            "users": int(per_user.size),
            "items": int(per_item.size),
            "user_min": int(per_user.min()),
            "user_median": float(np.median(per_user)),
            "user_mean": round(float(per_user.mean()), 1),
            "user_max": int(per_user.max()),
            "item_gini": round(gini(per_item), 3),
            "item_max": int(per_item.max()),
            "time_min": self.time[0],
            "time_max": self.time[1],
        }


def run_parquet(cfg: SynthConfig) -> int:
    """``ncf synth --format parquet``: write the parts, then the resolved config beside them."""
    if cfg.out.suffix.lower() == ".csv":
        raise ValueError(
            f"--out {cfg.out}: --format parquet writes a folder: name it *.parquet, or a "
            "directory to hold ratings.parquet/"
        )
    folder = parts.output_folder(cfg.out)
    parts.check_output(folder, "synth", cfg.force)
    t0 = time.perf_counter()
    tally = Tally()
    blocks = map(tally.add, generate_blocks(cfg))
    written = parts.write_parts(blocks, folder, cfg.part_ratings, "synth", cfg.force)
    write_config(parts.config_path(folder), cfg, "synth")
    stats = tally.summary()
    print(" ".join(f"{k}={v}" for k, v in stats.items()), file=sys.stderr)
    print(
        f"ncf synth: {written.rows:,} ratings in {written.parts} part file(s), "
        f"{time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    print(folder)
    return 0
