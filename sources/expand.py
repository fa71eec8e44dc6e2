"""``ncf expand``: a real ratings table grown to MLPerf size by a randomized Kronecker expansion.

In the spirit of Belletti et al. (2019), "Scaling Up Collaborative Filtering Data Sets through
Randomized Fractal Expansions" (docs/FACTS.md), with which MLPerf grew ML-20m to 1.2 billion
ratings (users x16, items x32). The rating matrix ``R`` [users, items] becomes the Kronecker
product of ``R`` with a ``U x I`` matrix of ones, thinned at random: every source rating (u, i)
spawns the cell (u copy a, i copy b) for each a < U, b < I, and each cell is kept independently
with probability ``keep``. The number of ratings grows by ``U * I * keep`` in expectation (61.8
at the defaults, MLPerf's growth).

- Ids: copy a of user u is ``u * U + a``, copy b of item i is ``i * I + b`` (so ``id // U`` is the
  source id); every id must stay below 2**31 (checked, with the largest factor that fits).
- A kept cell carries its source rating's value and timestamp: a user copy's ratings are a random
  subset of its source user's, stamped at the same seconds, so leave-one-out by time still picks
  a latest item (several copies of one source rating share its second: the ETL's ``--ties`` rule
  picks among them).
- Randomness: source user u's cells draw from their own stream (Philox keyed by the seed and u),
  so the output depends only on the input, ``users``, ``items``, ``keep`` and ``seed``, never on
  ``block_ratings`` or ``part_ratings``, and a user's copies do not depend on the other users.
- Streaming: the source table is held (about 20 bytes per rating, sorted by user then item); the
  output is drawn and written a block of source users at a time (``block_ratings`` expected rows),
  sorted by (userId, movieId).

What it preserves and what it does not: docs/DATA.md.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, flag, setting, write_config
from ncf.sources import parts
from ncf.sources.ratings_in import read_ratings

# MLPerf's expansion of ML-20m (docs/FACTS.md): x16 users, x32 items, 1,236,671,600 ratings
# (train + test) from 20,000,263: 61.8 per source rating, 0.1208 of the 512 cells.
MLPERF_USERS = 16
MLPERF_ITEMS = 32
MLPERF_KEEP = 0.1208
ID_LIMIT = 2**31  # ids are int32 in every stage


@dataclass
class ExpandConfig(Config):
    """Grow a ratings table by a randomized Kronecker expansion (`ncf expand`)."""

    input: Path | None = setting(
        None,
        help="ratings.csv (ML-20m format) or a parquet folder of ratings (required; held in "
        "memory: about 100 bytes per rating while it is read and sorted)",
        positional=True,
        nargs="?",
        metavar="INPUT",
    )
    out: Path | None = setting(
        None,
        help="parquet folder to write: a path ending in .parquet, or a directory to hold "
        "ratings.parquet/ (required)",
    )
    users: int = setting(MLPERF_USERS, help="copies of each user (MLPerf: 16)")
    items: int = setting(MLPERF_ITEMS, help="copies of each item (MLPerf: 32)")
    keep: float = setting(
        MLPERF_KEEP,
        help="probability that each (user copy, item copy) of a rating is kept: ratings grow by "
        "users x items x keep (MLPerf's ML-20m: 61.8)",
    )
    seed: int = setting(DEFAULT_SEED, help="random seed (output is deterministic)")
    block_ratings: int = setting(
        1 << 22,
        help="expected output rows drawn per block of source users (memory about 100 bytes per row; "
        "does not change the output)",
    )
    part_ratings: int = setting(
        1 << 23,
        help="rows per part file (a file closes at the first block boundary past it)",
    )
    force: bool = flag(False, help="replace an output folder that `ncf expand` wrote before")

    def check(self) -> None:
        """Raise ValueError naming the flag of a value the expansion cannot use."""
        if self.input is None:
            raise ValueError("INPUT: required (`ncf expand ratings.csv --out big.parquet`)")
        if self.out is None:
            raise ValueError("--out: required (see `ncf expand --help`)")
        for name in ("users", "items", "block_ratings", "part_ratings"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if not 0.0 < self.keep <= 1.0:
            raise ValueError(f"--keep {self.keep}: must be in (0, 1] (a probability)")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"--seed {self.seed}: must be in [0, 2**32)")


CONFIG = ExpandConfig


@dataclass(frozen=True)
class Source:
    """The source table sorted by (user, item), and where each user's rows are."""

    columns: dict[str, np.ndarray]  # RAW_COLUMNS, sorted by (userId, movieId)
    users: np.ndarray  # [n_users] int64 source userIds, ascending
    starts: np.ndarray  # [n_users + 1] int64 row offsets of each user's rows


def prepare(columns: dict[str, np.ndarray]) -> Source:
    """Sort ``columns`` by (user, item) (stable) and index each user's rows."""
    user = columns[names.RAW_USER].astype(np.int64)
    order = np.lexsort((columns[names.RAW_ITEM], user))
    columns = {k: v[order] for k, v in columns.items()}
    users, starts = np.unique(columns[names.RAW_USER], return_index=True)
    bounds = np.append(starts, columns[names.RAW_USER].size).astype(np.int64)
    return Source(columns, users.astype(np.int64), bounds)


def check_ids(src: Source, cfg: ExpandConfig) -> None:
    """Raise ValueError if a copy's id would reach 2**31, naming the id and the largest factor."""
    for column, factor, option in (
        (names.RAW_USER, cfg.users, "--users"),
        (names.RAW_ITEM, cfg.items, "--items"),
    ):
        top = int(src.columns[column].max())
        if top * factor + factor - 1 >= ID_LIMIT:
            fits = ID_LIMIT // (top + 1)
            raise ValueError(
                f"{cfg.input}: {column} {top} x {option} {factor} makes ids past 2**31 - 1 "
                f"(copy ids are id * factor + copy); use {option} {fits} or less"
            )


def kept_cells(rng: np.random.Generator, cells: int, keep: float) -> np.ndarray:
    """Sorted indices in ``[0, cells)`` of the cells kept, each independently with probability
    ``keep``: the gaps between kept cells are geometric, so the work is the kept cells, not all."""
    out, last = [], -1
    while True:
        mean = (cells - 1 - last) * keep
        pos = last + np.cumsum(rng.geometric(keep, int(mean + 6 * math.sqrt(mean) + 16)))
        if pos[-1] >= cells:
            out.append(pos[: np.searchsorted(pos, cells)])
            return np.concatenate(out)
        out.append(pos)
        last = int(pos[-1])


def user_stream(seed: int, user: int) -> np.random.Generator:
    """Source user ``user``'s own random stream (Philox: one key per (seed, user))."""
    return np.random.Generator(np.random.Philox(key=(seed << 32) | user))


def expand_block(src: Source, lo: int, hi: int, cfg: ExpandConfig) -> dict[str, np.ndarray]:
    """The expanded rows of source users ``lo:hi`` (indices into ``src.users``), sorted by
    (userId, movieId).

    User u's cells are numbered ``(a * d + j) * I + b`` (copy a, its j-th rating, item copy b;
    d ratings): in that order the rows come out by user copy, then item, then item copy.
    """
    n_items = cfg.items
    deg = np.diff(src.starts[lo : hi + 1])  # [k] ratings per source user
    picks = [
        kept_cells(user_stream(cfg.seed, int(u)), int(d) * cfg.users * n_items, cfg.keep)
        for u, d in zip(src.users[lo:hi], deg, strict=True)
    ]
    owner = np.repeat(np.arange(hi - lo), [p.size for p in picks])  # [n] block-local user
    pos = np.concatenate(picks)  # [n] int64 cell index within its user
    per_copy = deg[owner] * n_items  # cells per user copy
    copy = pos // per_copy  # (np.divmod is several times slower than // then -)
    j = (pos - copy * per_copy) // n_items  # the user's j-th rating
    b = (pos - copy * per_copy - j * n_items).astype(np.int32)  # item copy
    row = src.starts[lo:hi][owner] + j  # the source rating of each kept cell
    c = src.columns
    user = src.users[lo:hi].astype(np.int32) * np.int32(cfg.users)  # < 2**31: check_ids
    return {  # int32 sums cannot overflow: check_ids bounds id * factor + copy
        names.RAW_USER: user[owner] + copy.astype(np.int32),
        names.RAW_ITEM: c[names.RAW_ITEM][row] * np.int32(n_items) + b,
        names.RAW_RATING: c[names.RAW_RATING][row],
        names.RAW_TIME: c[names.RAW_TIME][row],
    }


def expand_blocks(src: Source, cfg: ExpandConfig) -> Iterator[dict[str, np.ndarray]]:
    """Yield the expansion block by block (about ``block_ratings`` expected rows each)."""
    expected = np.diff(src.starts) * (cfg.users * cfg.items * cfg.keep)
    ends = np.cumsum(expected)
    lo = 0
    while lo < src.users.size:
        base = ends[lo - 1] if lo else 0.0
        hi = max(lo + 1, int(np.searchsorted(ends, base + cfg.block_ratings, side="right")))
        yield expand_block(src, lo, hi, cfg)
        lo = hi


def run(cfg: ExpandConfig) -> int:
    """Read, expand, write the parts, then the resolved config beside them."""
    folder = parts.output_folder(cfg.out)
    if cfg.out.suffix.lower() == ".csv":
        raise ValueError(
            f"--out {cfg.out}: ncf expand writes a parquet folder: name it *.parquet, or a "
            "directory to hold ratings.parquet/"
        )
    parts.check_output(folder, "expand", cfg.force, (cfg.input,))  # before reading the input
    t0 = time.perf_counter()
    src = prepare(read_ratings(cfg.input))
    check_ids(src, cfg)
    rows = src.columns[names.RAW_USER].size
    written = parts.write_parts(
        expand_blocks(src, cfg), folder, cfg.part_ratings, "expand", cfg.force, (cfg.input,)
    )
    write_config(parts.config_path(folder), cfg, "expand")
    print(
        f"ncf expand: {rows:,} ratings of {src.users.size:,} users -> {written.rows:,} ratings "
        f"({written.rows / rows:.1f}x; expected {cfg.users * cfg.items * cfg.keep:.1f}x) in "
        f"{written.parts} part file(s), {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    print(folder)
    return 0
