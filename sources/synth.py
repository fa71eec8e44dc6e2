"""``ncf synth``: an ML-20m-like synthetic ``ratings.csv`` with planted, learnable structure.

Calibration (scale 1.0) follows ML-20m (docs/FACTS.md): 138,493 users, 26,744 items, 20,000,263
ratings; every user has >= 20 ratings (median ~68, mean 144.4, max 9,254); long-tailed item
popularity (Gini ~0.9, top item ~67k ratings); timestamps in 789652004..1427784002; half-star
ratings with ML-20m's exact value proportions; contiguous userIds, movieIds spread over 1..131262;
rows sorted by (userId, movieId) as in the real file, so consumers must sort by time themselves.

Planted structure (what a recommender can learn):
- Every item has one of ``genres`` latent genres and a global popularity weight ``w`` (power law in
  its popularity rank with an exponential cut-off: a flat head and a thin tail). Every user has a
  primary and a secondary genre (drawn in proportion to the genres' popularity mass) and mixture
  weights ``a`` (primary), ``b`` (secondary), ``c = 1 - a - b`` (global popularity); item ``j``'s
  weight for user ``u`` is
  ``q_u(j) = a_u w_j [g_j = g1_u] / W_g1 + b_u w_j [g_j = g2_u] / W_g2 + c_u w_j``.
- Each user's items are a draw without replacement from ``q_u``.
- Time order: users start with mainstream titles and move into their niche. An item of the user's
  own genres is ``1 + drift`` times as likely as another to come after any given point, so the
  leave-one-out test item (the latest) is usually in the user's genres: a personalised model
  (which learns the genres from the earlier items) beats a popularity ranking on HR@10.
  ``affinity=0, drift=0`` removes all structure (pure popularity, random order).

``--format parquet`` draws the same table block by block in bounded memory (``synth_blocks``,
which says what equals this in-memory CSV path).

Sampling is vectorised: light users draw with replacement and keep the first ``k`` distinct items
(identical in law to sampling without replacement); heavy users (``k > n_items / 50``) and light
users still short after a few rounds use the exponential race (Gumbel top-k) on a dense
``[users, items]`` block. Both run in chunks; full scale (``ncf synth --scale 1.0``) on 2 cores:
~80 s and 1.3 GB peak RSS, of which ~12 s is writing the 540 MB CSV.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ncf.core import names
from ncf.core.atomic import check_file_replaceable, clean_stale
from ncf.core.config import DEFAULT_SEED, Config, flag, flag_name, setting, write_config

# ML-20m facts the generator is calibrated to (docs/FACTS.md, "MovieLens").
ML20M_USERS = 138_493
ML20M_ITEMS = 26_744
ML20M_RATINGS = 20_000_263
ML20M_MAX_USER_RATINGS = 9_254
ML20M_MAX_MOVIE_ID = 131_262
TIME_MIN = 789_652_004
TIME_MAX = 1_427_784_002
RATING_VALUES = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0])
RATING_COUNTS = np.array(
    [239125, 680732, 279252, 1430997, 883398, 4291193, 2200156, 5561926, 1534824, 2898660]
)
MIN_USER_RATINGS = 20
# Below this many items the catalogue cannot hold users with ~144 ratings plus 100 eval negatives.
MIN_ITEMS = 1_000
MIN_SCALE = 0.0003

_LIGHT_DRAWS_PER_CHUNK = 4_000_000  # with-replacement draws per light-user chunk
_HEAVY_CELLS_PER_CHUNK = 8_000_000  # users x items cells per heavy-user chunk (float32)


@dataclass
class SynthConfig(Config):
    """An ML-20m-like synthetic ratings table with planted structure (`ncf synth`).

    The generator's knobs: the defaults reproduce ML-20m's statistics at ``scale=1``.
    """

    out: Path | None = setting(
        None,
        help="where to write (required): csv: a ratings.csv path or a directory to hold "
        "ratings.csv; parquet: a folder ending in .parquet or a directory to hold ratings.parquet/",
    )
    format: Literal["csv", "parquet"] = setting(
        "csv",
        help="csv: one ratings.csv, drawn in memory (about 60 bytes per rating); parquet: a folder "
        "of part files, drawn block by block in bounded memory (any scale; sources/synth_blocks.py "
        "says what equals the csv output)",
    )
    block_ratings: int = setting(
        1 << 20,
        help="parquet: ratings drawn per block of users (memory ~ 200 bytes per rating of a block; "
        "each block has its own random stream, so the rows depend on it)",
    )
    part_ratings: int = setting(
        1 << 23,
        help="parquet: rows per part file (a file closes at the first block boundary past it)",
    )
    scale: float = setting(
        1.0, help="fraction of ML-20m's size (1.0: 138,493 users, 20,000,263 ratings)"
    )
    items: int = setting(
        0,
        help=f"catalogue size, apart from the scale (0: 26,744 x scale, at least {MIN_ITEMS:,}); "
        "more items than the scale gives make a sparse catalogue with a long tail",
    )
    seed: int = setting(DEFAULT_SEED, help="random seed (output is deterministic)")
    genres: int = setting(20, help="latent genres planted in items and user tastes")
    affinity: float = setting(
        1.0, help="strength of personal tastes in [0, 1]; 0 = popularity only"
    )
    drift: float = setting(
        5.0,
        help="odds (1 + drift) that an own-genre item is rated later than another; 0 = random order",
    )
    pop_exponent: float = setting(2.0, help="item weight ~ (popularity rank + offset) ** -exponent")
    pop_offset: float = setting(100.0, help="flat head of the popularity curve (at 26,744 items)")
    pop_cutoff: float = setting(
        6000.0, help="if > 0, weights also decay as exp(-rank / cutoff): a thin tail"
    )
    user_sigma: float = setting(1.38, help="lognormal sigma of (ratings per user - 20)")
    user_median_extra: float = setting(
        48.0, help="median of (ratings per user - 20) before rescaling"
    )
    force: bool = flag(
        False, help="replace an output (file or parquet folder) that `ncf synth` wrote before"
    )

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError naming the flag of a knob the generator cannot use."""
        if not (math.isfinite(self.scale) and self.scale >= MIN_SCALE):
            raise ValueError(
                f"--scale {self.scale}: must be a number >= {MIN_SCALE} (1.0 = ML-20m size; below "
                f"{MIN_SCALE} there are too few ratings to rate each of the {MIN_ITEMS} items)"
            )
        if self.items != 0 and self.items < MIN_ITEMS:
            raise ValueError(
                f"--items {self.items}: must be 0 (from --scale) or at least {MIN_ITEMS:,} (room for "
                "a heavy user's ratings plus 100 evaluation negatives)"
            )
        if self.genres < 2:
            raise ValueError(f"--genres {self.genres}: need at least 2 (a primary and a secondary)")
        if not 0.0 <= self.affinity <= 1.0:
            raise ValueError(f"--affinity {self.affinity}: must be in [0, 1]")
        if self.seed < 0:
            raise ValueError(f"--seed {self.seed}: must be >= 0 (numpy seeds are non-negative)")
        for name in ("block_ratings", "part_ratings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{flag_name(name)} {getattr(self, name)}: must be at least 1")


CONFIG = SynthConfig


@dataclass(frozen=True)
class Sizes:
    """Row counts derived from the scale."""

    users: int
    items: int
    ratings: int
    max_per_user: int


def sizes(scale: float, items: int = 0) -> Sizes:
    """Users, items and ratings at ``scale`` (linear in scale; at least ``MIN_ITEMS`` items, or
    ``items`` when it is given).

    The per-user cap keeps ML-20m's ratio (9,254 of 26,744 items) so that every user leaves
    enough unrated items for 100 evaluation negatives.
    """
    users = max(1, round(ML20M_USERS * scale))
    items = items or max(MIN_ITEMS, round(ML20M_ITEMS * scale))
    cap = max(MIN_USER_RATINGS, round(ML20M_MAX_USER_RATINGS * items / ML20M_ITEMS))
    ratings = min(max(round(ML20M_RATINGS * scale), MIN_USER_RATINGS * users), cap * users)
    return Sizes(users, items, ratings, cap)


def _soft_cap(x: np.ndarray, limit: float) -> np.ndarray:
    """Identity below ``limit / 2``, then an exponential approach to ``limit`` (no pile-up at it)."""
    knee = limit / 2
    over = np.maximum(x - knee, 0.0)
    return np.where(x <= knee, x, knee + (limit - knee) * -np.expm1(-over / (limit - knee)))


def user_counts(rng: np.random.Generator, cfg: SynthConfig, sz: Sizes) -> np.ndarray:
    """Ratings per user ``[users]`` int64: 20 + lognormal extra, summing exactly to ``sz.ratings``.

    The extra is scaled (bisection) so the total is met; the heaviest user gets exactly the cap.
    """
    limit = sz.max_per_user - MIN_USER_RATINGS
    extra = rng.lognormal(math.log(cfg.user_median_extra), cfg.user_sigma, sz.users)
    target = sz.ratings - MIN_USER_RATINGS * sz.users
    lo, hi = 0.0, 1.0
    while _soft_cap(hi * extra, limit).sum() < target and hi < 1e9:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _soft_cap(mid * extra, limit).sum() < target else (lo, mid)
    counts = MIN_USER_RATINGS + np.floor(_soft_cap(hi * extra, limit)).astype(np.int64)
    if sz.ratings - sz.max_per_user >= MIN_USER_RATINGS * (sz.users - 1):  # room for the others
        counts[np.argmax(counts)] = sz.max_per_user
    return _fix_total(rng, counts, sz.ratings, sz.max_per_user)


def _fix_total(rng: np.random.Generator, counts: np.ndarray, total: int, cap: int) -> np.ndarray:
    """Add or remove single ratings at random users (within [20, cap)) until the sum is ``total``."""
    diff = int(total - counts.sum())
    top = int(np.argmax(counts))
    room = counts < cap if diff > 0 else counts > MIN_USER_RATINGS
    if room.sum() > 1:
        room[top] = False  # keep the maximum where it was put
    eligible = np.flatnonzero(room)
    while diff != 0 and eligible.size:
        take = rng.choice(eligible, min(abs(diff), eligible.size), replace=False)
        counts[take] += 1 if diff > 0 else -1
        diff = int(total - counts.sum())
        ok = counts[eligible] < cap if diff > 0 else counts[eligible] > MIN_USER_RATINGS
        eligible = eligible[ok]
    return counts


@dataclass
class Catalogue:
    """Items: raw ids, popularity ``w`` (sums to 1), genre, and per-genre samplers."""

    raw_ids: np.ndarray  # [items] int64, ascending (item index order == movieId order)
    w: np.ndarray  # [items] float64
    genre: np.ndarray  # [items] int64
    genre_mass: np.ndarray  # [genres] float64, sum of w per genre
    genre_order: np.ndarray  # [items] item indices sorted by genre
    genre_cdf: np.ndarray  # [items] g + within-genre cumulative share, in (g, g + 1]
    global_cdf: np.ndarray  # [items] cumulative share of w


def catalogue(rng: np.random.Generator, cfg: SynthConfig, n_items: int) -> Catalogue:
    """Draw item raw ids, power-law popularity (random rank per id) and genres."""
    space = max(ML20M_MAX_MOVIE_ID, 5 * n_items)
    inner = rng.choice(space - 2, n_items - 2, replace=False) + 2  # movieIds 2..space-1
    raw_ids = np.sort(np.concatenate(([1, space], inner))).astype(np.int64)
    # The popularity curve keeps its shape at every scale: rank is measured in ML-20m units.
    rank = rng.permutation(n_items) * (ML20M_ITEMS / n_items)
    w = (rank + 1 + cfg.pop_offset) ** -cfg.pop_exponent
    if cfg.pop_cutoff > 0:
        w *= np.exp(-rank / cfg.pop_cutoff)
    w /= w.sum()
    genre = rng.integers(0, cfg.genres, n_items)
    genre[rng.permutation(n_items)[: cfg.genres]] = np.arange(cfg.genres)  # no empty genre
    mass = np.bincount(genre, weights=w, minlength=cfg.genres)
    order = np.argsort(genre, kind="stable")
    within = np.cumsum(w[order])
    starts = np.searchsorted(genre[order], np.arange(cfg.genres))
    before = np.concatenate(([0.0], within))[starts]  # cumulative mass before each genre block
    cdf = genre[order] + (within - before[genre[order]]) / mass[genre[order]]
    # Each block ends at exactly g + 1, so a draw g + U (U < 1) never rounds into the next genre.
    cdf[np.append(starts[1:], n_items) - 1] = np.arange(1, cfg.genres + 1)
    return Catalogue(raw_ids, w, genre, mass, order, cdf, np.cumsum(w))


@dataclass
class Tastes:
    """Per-user genres and mixture weights (primary ``a``, secondary ``b``, popularity rest)."""

    g1: np.ndarray  # [users] int64
    g2: np.ndarray  # [users] int64
    a: np.ndarray  # [users] float64
    b: np.ndarray  # [users] float64


def tastes(rng: np.random.Generator, cfg: SynthConfig, cat: Catalogue, n_users: int) -> Tastes:
    """Two distinct genres per user, drawn in proportion to genre mass (Gumbel top-2)."""
    keys = np.log(cat.genre_mass)[None, :] + rng.gumbel(size=(n_users, cfg.genres))
    top2 = np.argsort(-keys, axis=1)[:, :2]
    a = cfg.affinity * rng.uniform(0.45, 0.7, n_users)
    b = cfg.affinity * rng.uniform(0.15, 0.3, n_users)
    return Tastes(top2[:, 0], top2[:, 1], a, b)


def _draw_items(
    rng: np.random.Generator, cat: Catalogue, ta: Tastes, owner: np.ndarray
) -> np.ndarray:
    """One item per draw (with replacement) from each owner's mixture ``q_u``; ``owner`` [D]."""
    u = rng.random(owner.size)
    pick = rng.random(owner.size)
    a = ta.a[owner]
    in_genre = np.flatnonzero(u < a + ta.b[owner])
    n = cat.w.size
    item = np.searchsorted(cat.global_cdf, pick, side="right").clip(0, n - 1)  # popularity draws
    sub = owner[in_genre]
    genre = np.where(u[in_genre] < a[in_genre], ta.g1[sub], ta.g2[sub])
    pos = np.searchsorted(cat.genre_cdf, genre + pick[in_genre], side="right").clip(0, n - 1)
    item[in_genre] = cat.genre_order[pos]
    return item


def _new_distinct(owner: np.ndarray, item: np.ndarray, need: np.ndarray, held: np.ndarray, n: int):
    """Indices of each owner's first ``need`` draws that are new (not repeated, not ``held``).

    ``owner`` [D] is sorted (owner-major, draw order); ``held`` holds sorted ``owner * n + item``
    keys the owners already have. Returns ``(rows, got)``: draw indices in draw order and the
    number of new items per owner ``[owners]``.
    """
    key = owner.astype(np.int64) * n + item
    _, first = np.unique(key, return_index=True)
    first.sort()  # back to draw order (owner-major)
    if held.size:
        first = first[~np.isin(key[first], held)]
    own = owner[first]
    rank = np.arange(first.size) - np.searchsorted(own, own)  # position among the owner's new
    rows = first[rank < need[own]]
    return rows, np.bincount(owner[rows], minlength=need.size)


def sample_light(
    rng: np.random.Generator,
    cat: Catalogue,
    ta: Tastes,
    users: np.ndarray,
    k: np.ndarray,
    rounds: int = 6,
):
    """Sequential sampling for light users by draws with replacement.

    Each user keeps the first ``k`` distinct items of a with-replacement sequence, which is
    sampling without replacement in law. Users still short after a round continue their sequence,
    with as many draws as their last round's yield of new items suggests. ``users`` is sorted.

    Returns
    -------
    tuple
        ``(user, item, unfinished)``: rows of the users done (any order) and the users still short
        after ``rounds`` rounds, whose rows are dropped (``sample_heavy`` redraws them exactly).
    """
    out_u, out_i = [], []
    need = k.astype(np.int64).copy()
    todo, per_new = np.arange(users.size), np.full(users.size, 1.5)  # draws per new item
    for _ in range(rounds):
        m = np.ceil(need[todo] * np.minimum(per_new[todo], 50.0) * 1.2).astype(np.int64) + 8
        owner = np.repeat(np.arange(todo.size), m)
        item = _draw_items(rng, cat, _subset(ta, users[todo]), owner)
        held = _held_keys(out_u, out_i, users[todo], cat.w.size) if out_u else np.empty(0, np.int64)
        rows, got = _new_distinct(owner, item, need[todo], held, cat.w.size)
        out_u.append(users[todo][owner[rows]])
        out_i.append(item[rows])
        need[todo] -= got
        per_new[todo] = m / np.maximum(got, 0.5)
        todo = todo[need[todo] > 0]
        if not todo.size:
            break
    user, item = np.concatenate(out_u), np.concatenate(out_i)
    keep = ~np.isin(user, users[todo])
    return user[keep], item[keep], users[todo]


def _held_keys(us: list, its: list, todo_users: np.ndarray, n: int) -> np.ndarray:
    """Sorted ``local owner * n + item`` keys of the items already drawn by ``todo_users``."""
    user, item = np.concatenate(us), np.concatenate(its)
    local = np.searchsorted(todo_users, user)  # todo_users is sorted ascending
    mine = (local < todo_users.size) & (todo_users[np.minimum(local, todo_users.size - 1)] == user)
    return np.sort(local[mine].astype(np.int64) * n + item[mine])


def _subset(ta: Tastes, users: np.ndarray) -> Tastes:
    return Tastes(ta.g1[users], ta.g2[users], ta.a[users], ta.b[users])


def sample_heavy(
    rng: np.random.Generator, cat: Catalogue, ta: Tastes, users: np.ndarray, k: np.ndarray
):
    """Exponential race over all items (``E_j / q_u(j)`` smallest ``k`` = sequential draw order).

    ``users`` is one chunk; dense ``[len(users), items]`` float32 blocks. Returns (user, item) rows.
    """
    w = cat.w.astype(np.float32)
    t = _subset(ta, users)
    q = np.outer(1.0 - t.a - t.b, w).astype(np.float32)  # [U, items]
    for g, share in ((t.g1, t.a), (t.g2, t.b)):
        scale = (share / cat.genre_mass[g]).astype(np.float32)[:, None]
        q += np.where(cat.genre[None, :] == g[:, None], scale * w, np.float32(0))
    race = rng.standard_exponential(q.shape, dtype=np.float32) / q
    kmax = int(k.max())
    top = np.argpartition(race, kmax - 1, axis=1)[:, :kmax]  # [U, kmax] unordered
    keep = np.argsort(np.argsort(np.take_along_axis(race, top, 1), axis=1), axis=1) < k[:, None]
    return np.broadcast_to(users[:, None], top.shape)[keep], top[keep]


def _chunks(costs: np.ndarray, budget: int) -> Iterator[slice]:
    """Consecutive slices whose summed cost stays within ``budget`` (at least one element each)."""
    ends = np.cumsum(costs)
    start = 0
    while start < costs.size:
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + budget, side="right")))
        yield slice(start, stop)
        start = stop


def sample_all(
    rng: np.random.Generator,
    cat: Catalogue,
    ta: Tastes,
    counts: np.ndarray,
    drift: float = 0.0,
    subset: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """The (user, item, timestamp) rows of the users ``subset`` (default: all; ``counts`` is over
    all users); rows of one user are contiguous and in time order."""
    n_items = cat.w.size
    heavy = counts > max(MIN_USER_RATINGS, n_items // 50)
    parts, unfinished = [], []
    pool = np.arange(counts.size) if subset is None else subset
    light_users = pool[~heavy[pool]]
    for sl in _chunks(counts[light_users] * 2, _LIGHT_DRAWS_PER_CHUNK):
        users = light_users[sl]
        user, item, short = sample_light(rng, cat, ta, users, counts[users])
        parts.append((users, user, item))
        unfinished.append(short)
    heavy_users = np.concatenate([pool[heavy[pool]], *unfinished])
    heavy_users = heavy_users[np.argsort(counts[heavy_users], kind="stable")]  # similar k per chunk
    for sl in _chunks(np.full(heavy_users.size, n_items), _HEAVY_CELLS_PER_CHUNK):
        users = heavy_users[sl]
        parts.append((users, *sample_heavy(rng, cat, ta, users, counts[users])))
    users_out, items_out, stamps = [], [], []
    for users, user, item in parts:
        user, item = time_order(rng, cat, ta, users, user, item, drift)
        users_out.append(user.astype(np.int32))
        items_out.append(item.astype(np.int32))
        stamps.append(timestamps(rng, user, counts))
    return np.concatenate(users_out), np.concatenate(items_out), np.concatenate(stamps)


def time_order(
    rng: np.random.Generator,
    cat: Catalogue,
    ta: Tastes,
    users: np.ndarray,
    user: np.ndarray,
    item: np.ndarray,
    drift: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by user (ascending id) and put each user's rows into rating-time order.

    The order is random, except that an item of the user's own genres is ``1 + drift`` times as
    likely as another item to come after any given point (users start with mainstream titles and
    move into their niche; the latest item is the test item): its key is ``U ** (1 / (1 + drift))``,
    distributed like the maximum of ``1 + drift`` uniforms. ``users`` lists the chunk's users.
    """
    match = (cat.genre[item] == ta.g1[user]) | (cat.genre[item] == ta.g2[user])
    key = np.exp(-rng.standard_exponential(user.size) / (1.0 + drift * match))  # in (0, 1]
    local = np.searchsorted(np.sort(users), user)  # user's rank in the chunk
    order = np.argsort(local + key * (1.0 - 1e-9))  # one float sort: (user, time key)
    return user[order], item[order]


def timestamps(rng: np.random.Generator, user: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Strictly increasing int64 timestamps per user for user-major rows in time order.

    Each user gets a start time and an activity span (lognormal, median ~2 days, up to years);
    ratings fall at sorted uniform positions inside it, then ties are pushed apart by 1 s.
    """
    first = np.flatnonzero(np.concatenate(([True], user[1:] != user[:-1])))  # each user's 1st row
    k = np.diff(np.append(first, user.size))
    users = user[first]
    slack = TIME_MAX - TIME_MIN - k - 1
    start = TIME_MIN + (rng.beta(1.0, 1.3, users.size) * slack).astype(np.int64)
    span = np.exp(rng.normal(math.log(2 * 86_400), 2.5, users.size))
    span = np.minimum(span, TIME_MAX - start - k).astype(np.int64)
    owner = np.repeat(np.arange(users.size), k)  # rows are grouped by user in ``user`` order
    rank = np.arange(user.size) - first[owner]
    gaps = np.cumsum(rng.standard_exponential(user.size))
    total = (
        gaps[first + k - 1]
        - np.concatenate(([0.0], gaps))[first]
        + rng.standard_exponential(users.size)
    )
    within = gaps - np.concatenate(([0.0], gaps))[first][owner]  # cumulative gap inside the user
    ts = start[owner] + np.floor(within / total[owner] * span[owner]).astype(np.int64)
    # Segmented running max of (ts - rank), one 2**32-wide band per user: strictly increasing ts.
    band = owner.astype(np.int64) << 32
    return np.maximum.accumulate(ts - rank + band) - band + rank


def cover_items(
    rng: np.random.Generator, item: np.ndarray, n_items: int, prior: np.ndarray | None = None
) -> None:
    """Give every never-drawn item one rating, taken (in place) from rows of popular items.

    ``prior`` [n_items]: ratings per item in rows outside ``item`` (already written blocks), so
    an item rated there counts as drawn and a popular one's rows here stay donors.
    """
    for _ in range(10):
        count = np.bincount(item, minlength=n_items)
        if prior is not None:
            count += prior
        missing = np.flatnonzero(count == 0)
        if missing.size == 0:
            return
        donors = np.flatnonzero(count[item] >= 20)  # rows whose item keeps >= 1 rating w.h.p.
        rows = rng.choice(donors, missing.size, replace=False)
        item[rows] = missing  # new (user, item) pairs cannot collide: the items had no ratings
    raise RuntimeError(f"{missing.size} items still have no rating after 10 repair rounds")


def rating_terms(
    rng: np.random.Generator, cat: Catalogue, n_users: int
) -> tuple[np.ndarray, np.ndarray]:
    """The per-item quality [items] and per-user bias [users] of the latent rating score."""
    quality = 0.3 * np.log(cat.w / cat.w.mean()) / np.log(cat.w).std() + rng.normal(
        0, 0.4, cat.w.size
    )
    return quality, rng.normal(0, 0.5, n_users)


def ratings(
    rng: np.random.Generator,
    cat: Catalogue,
    ta: Tastes,
    user: np.ndarray,
    item: np.ndarray,
    terms: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Half-star ratings with ML-20m's exact value proportions among these rows, correlated with
    user bias, item quality and genre match (rank of a latent score mapped onto the value quotas).

    ``terms``: ``rating_terms`` drawn once for every block of a streamed table (drawn here from
    ``rng`` when None).
    """
    quality, bias = rating_terms(rng, cat, ta.g1.size) if terms is None else terms
    score = bias[user] + quality[item]
    score += 0.6 * (cat.genre[item] == ta.g1[user]) + rng.normal(0, 0.8, user.size)
    quota = _largest_remainder(RATING_COUNTS / RATING_COUNTS.sum(), user.size)
    # Value of the last row of each quota in score order (one O(n) partition, no full sort);
    # scores are continuous float64, so ties (which would shift a quota by one) do not occur.
    last = np.cumsum(quota)[:-1] - 1  # [9]; -1 (bound -inf) where the first quotas are empty
    part = np.partition(score, np.unique(last[last >= 0]))
    bounds = np.where(last >= 0, part[np.maximum(last, 0)], -np.inf)
    codes = np.searchsorted(bounds, score, side="left")  # empty quotas repeat a bound: no rows
    return RATING_VALUES.astype(np.float32)[codes]


def _largest_remainder(p: np.ndarray, n: int) -> np.ndarray:
    """Integer quotas summing to ``n`` proportional to ``p`` (exact ML-20m counts at scale 1)."""
    raw = p * n
    q = np.floor(raw).astype(np.int64)
    q[np.argsort(-(raw - q), kind="stable")[: n - int(q.sum())]] += 1
    return q


def generate(cfg: SynthConfig) -> dict[str, np.ndarray]:
    """Generate the ratings table as columns named by ``ncf.core.names.RAW_COLUMNS``.

    Returns
    -------
    dict
        ``userId`` int32 (1..users), ``movieId`` int32, ``rating`` float32, ``timestamp`` int64,
        sorted by (userId, movieId); deterministic for a given ``cfg``.
    """
    rng = np.random.default_rng(cfg.seed)
    sz = sizes(cfg.scale, cfg.items)
    counts = user_counts(rng, cfg, sz)
    cat = catalogue(rng, cfg, sz.items)
    ta = tastes(rng, cfg, cat, sz.users)
    user, item, ts = sample_all(rng, cat, ta, counts, cfg.drift)
    cover_items(rng, item, sz.items)
    ts[np.argmin(ts)], ts[np.argmax(ts)] = TIME_MIN, TIME_MAX  # a user's first / last: order kept
    rating = ratings(rng, cat, ta, user, item)
    order = np.argsort(user.astype(np.int64) * sz.items + item)
    return {
        names.RAW_USER: user[order] + np.int32(1),
        names.RAW_ITEM: cat.raw_ids.astype(np.int32)[item[order]],
        names.RAW_RATING: rating[order],
        names.RAW_TIME: ts[order],
    }


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator[Path]:
    """A temp path beside ``path``, renamed onto it on success and deleted on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a data file is readable like any other
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_ratings_csv(columns: dict[str, np.ndarray], path: str | os.PathLike) -> Path:
    """Write the columns as ML-20m's ``ratings.csv`` (header, ``4.0``-style ratings) atomically."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = Path(path)
    codes = np.searchsorted(RATING_VALUES, columns[names.RAW_RATING]).astype(np.int8)
    labels = pa.array([f"{v:.1f}" for v in RATING_VALUES])
    table = pa.table(
        {
            names.RAW_USER: columns[names.RAW_USER],
            names.RAW_ITEM: columns[names.RAW_ITEM],
            names.RAW_RATING: pa.DictionaryArray.from_arrays(pa.array(codes), labels),
            names.RAW_TIME: columns[names.RAW_TIME],
        }
    )
    try:
        options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    except TypeError:  # pyarrow < 12 cannot switch quoting off: write plain floats ("4", "3.5")
        options = pacsv.WriteOptions(include_header=False)
        table = table.set_column(
            2, names.RAW_RATING, pa.array(columns[names.RAW_RATING], pa.float64())
        )
    with _atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write((",".join(names.RAW_COLUMNS) + "\n").encode())
        pacsv.write_csv(table, f, options)
        f.flush()
        os.fsync(f.fileno())
    return path


def summary(columns: dict[str, np.ndarray]) -> dict[str, float]:
    """Headline statistics (those docs/FACTS.md lists for ML-20m) of a generated table."""
    per_user = np.bincount(columns[names.RAW_USER])
    per_user = per_user[per_user > 0]
    per_item = np.unique(columns[names.RAW_ITEM], return_counts=True)[1]
    return {
        "ratings": int(columns[names.RAW_USER].size),
        "users": int(per_user.size),
        "items": int(per_item.size),
        "user_min": int(per_user.min()),
        "user_median": float(np.median(per_user)),
        "user_mean": round(float(per_user.mean()), 1),
        "user_max": int(per_user.max()),
        "item_gini": round(gini(per_item), 3),
        "item_max": int(per_item.max()),
        "time_min": int(columns[names.RAW_TIME].min()),
        "time_max": int(columns[names.RAW_TIME].max()),
    }


def gini(counts: np.ndarray) -> float:
    """Gini coefficient of non-negative ``counts`` (0 = equal, -> 1 = concentrated)."""
    x = np.sort(np.asarray(counts, dtype=np.float64))
    n = x.size
    return float((2 * np.arange(1, n + 1) - n - 1).dot(x) / (n * x.sum()))


def output_path(out: str | os.PathLike) -> Path:
    """``--out`` may name the CSV file or a directory that receives ``ratings.csv``."""
    out = Path(out)
    if out.suffix.lower() == ".parquet":
        raise ValueError(
            f"--out {out}: a .parquet name is a parquet folder: add --format parquet, or name a "
            ".csv file or a directory"
        )
    return out if out.suffix.lower() == ".csv" else out / "ratings.csv"


def config_path(csv: Path) -> Path:
    """Where ``ncf synth`` records the resolved config of ``csv``: ``ratings.config.json``
    beside ``ratings.csv`` (``ncf synth --config`` it, with ``--force``, to write it again)."""
    return csv.with_suffix(".config.json")


def run(cfg: SynthConfig) -> int:
    """Generate and write the ratings and, beside them, the resolved config."""
    if cfg.out is None:
        raise ValueError("--out: required (see `ncf synth --help`)")
    if cfg.format == "parquet":
        from ncf.sources.synth_blocks import run_parquet  # it imports this module

        return run_parquet(cfg)
    path = output_path(cfg.out)
    check_file_replaceable(path, "synth", cfg.force, config_path(path))
    t0 = time.perf_counter()
    columns = generate(cfg)
    t1 = time.perf_counter()
    write_ratings_csv(columns, path)
    write_config(config_path(path), cfg, "synth")
    t2 = time.perf_counter()
    stats = summary(columns)
    print(" ".join(f"{k}={v}" for k, v in stats.items()), file=sys.stderr)
    print(f"ncf synth: generated in {t1 - t0:.1f} s, wrote in {t2 - t1:.1f} s", file=sys.stderr)
    print(path)
    return 0
