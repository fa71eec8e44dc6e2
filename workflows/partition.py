"""The ETL's per-user steps, on one partition of users (numpy or cupy arrays; no NVTabular).

A partition is any set of users with every one of their ratings. Each step here decides user by
user, so running it on the whole data at once (the in-memory path) or on each partition of a
shuffle by user (the partitioned path) gives every user the same rows:

1. :func:`prepare` (raw ids): the latest of duplicate pairs, the minimum-ratings filters, and the
   held-out rows (leave-last-out by time). Its summary (distinct users with their counts,
   distinct items, dropped rows) is all the driver needs to fit the id vocabularies.
2. :func:`finish` (after the vocabularies are fitted on every partition's kept ratings): model
   ids, exact evaluation negatives seeded per user (``ncf.workflows.negatives``), and the output
   rows, sorted by model user id (a user's rows keep the input's order; negatives their draw order).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ncf.workflows import metadata as md
from ncf.workflows.backend import array_module, dense_codes, repeat, stable_argsort, to_numpy
from ncf.workflows.encoding import Encoding
from ncf.workflows.negatives import check_feasible, sample_negatives, user_streams
from ncf.workflows.split import hold_out_latest, latest_of_duplicates, min_count_mask

# ``Prepared.held`` codes: held-out split k of hold_out_latest (0 = test) has code k + 1.
TRAIN, TEST, VALID = 0, 1, 2
RUN_COPY_MIN_LENGTH = 32  # mean rows per run above which runs are moved by slices
COLD_SALT = 0xC01D  # offsets the seed of the cold-user draw from the negatives' draws


def cold_user_rows(user: Any, fraction: float, seed: int) -> Any:
    """True for the rows of the users held out entirely (``ncf etl --cold-users``), bool ``[n]``.

    A user is held out when a seeded hash of its raw id falls in the first ``fraction`` of the
    hash's range: every partition decides alike, and about ``fraction`` of the users go.
    """
    xp = array_module(user)
    if fraction <= 0:
        return xp.zeros(user.shape, dtype=bool)
    h = user_streams(user.astype(xp.int64), seed + COLD_SALT)  # uint64 [n]
    return (h >> xp.uint64(11)).astype(xp.float64) * 2.0**-53 < fraction  # top 53 bits in [0, 1)


def negative_seeds(seed: int, n_held: int) -> list[int]:
    """Seeds of the negative draws: ``seed`` for test (as ``--holdout test`` draws), then one
    derived from ``seed`` by numpy's SeedSequence for valid (an independent stream)."""
    derived = np.random.SeedSequence([seed, 1]).generate_state(1, np.uint32)[0]
    return [seed, int(derived)][:n_held]


def partition_of(user: Any, partitions: int) -> Any:
    """The partition of each raw user id, int64 ``[n]`` in ``[0, partitions)`` (a hash: balanced
    for any id layout, and the same in every process)."""
    xp = array_module(user)
    return (user_streams(user.astype(xp.int64), 0) % xp.uint64(partitions)).astype(xp.int64)


@dataclasses.dataclass
class Prepared:
    """One partition's kept ratings (raw ids, input order) and what was dropped."""

    user: Any  # int32 [n] raw user id
    item: Any  # int32 [n] raw item id
    held: Any  # int8 [n] TRAIN, TEST or VALID
    users: Any  # distinct raw user ids, ascending [n_users]
    counts: Any  # int64 [n_users] kept ratings (= distinct items) of each user
    items: Any  # distinct raw item ids, ascending [n_items]
    dropped: dict[str, int]
    dropped_users: dict[str, int]
    cold: dict[str, Any] | None = None  # ``user``, ``item``, ``time`` [m] of the cold users


def prepare(
    cols: dict[str, Any],
    min_ratings: int,
    holdout: str,
    file_order: bool = False,
    cold: tuple[float, int] = (0.0, 0),
) -> Prepared:
    """De-duplicate, filter and split one partition (raw ids; every user with all its rows).

    Parameters
    ----------
    cols
        ``user``, ``item`` (int32 raw ids), ``time`` (int64) and, for ``file_order``, ``row``
        (int64, increasing in input order) of the partition's ratings, shape ``[n]``, in input
        order.
    min_ratings
        Users with fewer kept ratings are dropped (then those below ``holdout``'s minimum).
    holdout
        ``"valid,test"`` or ``"test"``.
    file_order
        Ties on timestamp go to the later row (``--ties file-order``) instead of the larger item.
    cold
        ``(fraction, seed)`` of :func:`cold_user_rows`: those users' de-duplicated ratings are
        set apart (``Prepared.cold``) before any filter.

    Returns
    -------
    Prepared
    """
    keep = latest_of_duplicates(cols["user"], cols["item"], cols["time"])
    n_dup = int(keep.size - keep.sum())
    cols = _take(cols, keep, n_dup)
    set_apart = cold_user_rows(cols["user"], *cold)
    n_cold = int(set_apart.sum())
    cold_rows = {k: cols[k][set_apart] for k in ("user", "item", "time")} if cold[0] > 0 else None
    cols = _take(cols, ~set_apart, n_cold)
    keep, small_users = min_count_mask(cols["user"], min_ratings)
    n_small = int(keep.size - keep.sum())
    cols = _take(cols, keep, n_small)
    need = md.holdout_minimum(holdout)
    few_rows, few_users = 0, 0
    if need > min_ratings:
        keep, few_users = min_count_mask(cols["user"], need)
        few_rows = int(keep.size - keep.sum())
        cols = _take(cols, keep, few_rows)
    xp = array_module(cols["user"])
    codes, users = dense_codes(cols["user"])
    _, items = dense_codes(cols["item"])
    held = xp.zeros(codes.shape, dtype=xp.int8)
    if codes.size:
        tie = cols["row"] if file_order else cols["item"]
        masks = hold_out_latest(codes, tie, cols["time"], users.size, len(holdout.split(",")))
        for k, mask in enumerate(masks):
            held[mask] = k + 1
    return Prepared(
        user=cols["user"],
        item=cols["item"],
        held=held,
        users=users,
        counts=xp.bincount(codes, minlength=users.size),
        items=items,
        dropped={
            "duplicate_pairs": n_dup,
            "users_below_min_ratings": n_small,
            "users_below_holdout_minimum": few_rows,
        },
        dropped_users={"below_min_ratings": small_users, "below_holdout_minimum": few_users},
        cold=cold_rows,
    )


@dataclasses.dataclass
class Summary:
    """What the driver needs of the prepared partitions: distinct users (with their counts) and
    items, and the rows and users dropped; host arrays."""

    users: np.ndarray  # raw user ids, ascending
    counts: np.ndarray  # kept ratings of each user
    items: np.ndarray  # distinct raw item ids, ascending
    dropped: dict[str, int]
    dropped_users: dict[str, int]
    cold: dict[str, int] = dataclasses.field(default_factory=dict)  # users, ratings set apart

    @classmethod
    def of(cls, part: Prepared) -> Summary:
        cold = {}
        if part.cold is not None:
            users = array_module(part.cold["user"]).unique(part.cold["user"])
            cold = {"users": int(users.size), "ratings": int(part.cold["user"].size)}
        return cls(
            to_numpy(part.users), to_numpy(part.counts), to_numpy(part.items),
            part.dropped, part.dropped_users, cold,
        )  # fmt: skip

    @classmethod
    def merge(cls, parts: list[Summary]) -> Summary:
        """One summary of disjoint partitions of users (as one partition of them all would be)."""
        total = {k: sum(p.dropped[k] for p in parts) for k in parts[0].dropped}
        dropped_users = {k: sum(p.dropped_users[k] for p in parts) for k in parts[0].dropped_users}
        users = np.concatenate([p.users for p in parts])
        order = np.argsort(users)
        counts = np.concatenate([p.counts for p in parts])[order]
        items = np.unique(np.concatenate([p.items for p in parts]))
        cold = {k: sum(p.cold[k] for p in parts) for k in parts[0].cold}
        return cls(users[order], counts, items, total, dropped_users, cold)

    def check(self, path: Any, min_ratings: int, holdout: str, negatives: int) -> None:
        """Raise ValueError when no user is left, or a user has too few items left to draw
        ``negatives`` from (naming the user and the fix)."""
        need = md.holdout_minimum(holdout)
        if self.users.size == 0:
            fix = "lower --min-ratings"
            if need > min_ratings:
                fix = f"--holdout {holdout} needs {need} per user (train, valid, test); try --holdout test"
            dropped = sum(self.dropped_users.values())
            raise ValueError(
                f"{path}: no user has >= {max(need, min_ratings)} ratings "
                f"({dropped} users dropped); {fix}"
            )
        check_feasible(self.counts, int(self.items.size), negatives, self.users)


def _take(cols: dict[str, Any], keep: Any, n_dropped: int) -> dict[str, Any]:
    """The rows of ``cols`` where ``keep`` (the same arrays when nothing is dropped)."""
    return {k: v[keep] for k, v in cols.items()} if n_dropped else cols


def finish(
    part: Prepared, encoding: Encoding, negatives: int, seeds: list[int]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The output rows of one prepared partition, in model ids.

    Parameters
    ----------
    part
        :func:`prepare`'s result.
    encoding
        The vocabularies fitted on every partition's kept ratings.
    negatives
        Evaluation negatives per user and held-out split.
    seeds
        One seed per held-out split, ``[test, valid]`` (:func:`negative_seeds`).

    Returns
    -------
    dict
        Dataset name (``names.TRAIN_DIR`` ...) -> host int64 ``(user_id, item_id)``, sorted by
        ``user_id``.
    """
    from ncf.core import names

    xp = array_module(part.user)
    # model id - lo, int32 [n]: half the bytes of int64 through the masks and gathers below.
    u_idx = encoding.user.index(part.user)
    i_idx = encoding.item.index(part.item)
    # Local dense users (for the sampler's arrays) in model-id order, so that its user-sorted
    # output is also sorted by model id.
    if part.users is not None and part.users.size == encoding.user.size:
        # Every user is in this partition (the in-memory path): model indexes are already dense.
        local, by_local = u_idx, xp.arange(part.users.size, dtype=xp.int64)
    else:
        local, by_local = dense_codes(u_idx)  # by_local: model index of each local user, ascending
    out = {names.TRAIN_DIR: _sorted_pairs(u_idx, i_idx, part.held == TRAIN, encoding)}
    datasets = [(TEST, names.TEST_DIR, names.NEGATIVES_DIR)]
    if len(seeds) > 1:
        datasets.append((VALID, names.VALID_DIR, names.VALID_NEGATIVES_DIR))
    for (code, held_dir, neg_dir), seed in zip(datasets, seeds, strict=True):
        out[held_dir] = _sorted_pairs(u_idx, i_idx, part.held == code, encoding)
        # One draw per held-out split, each over every positive (train, valid and test).
        nu, ni = sample_negatives(
            local, i_idx, by_local.size, encoding.item.size, negatives, seed, user_keys=by_local
        )
        out[neg_dir] = _model_ids(by_local[nu], ni, encoding)
    return out


def _sorted_pairs(u_idx: Any, i_idx: Any, mask: Any, encoding: Encoding) -> tuple:
    """The rows where ``mask``, stably sorted by user (each user keeps its input order)."""
    u, i = u_idx[mask], i_idx[mask]
    if u.size > 1 and bool((u[1:] < u[:-1]).any()):
        grouped = _grouped_sort(u, i)
        if grouped is None:
            order = stable_argsort(u)
            grouped = u[order], i[order]
        u, i = grouped
    return _model_ids(u, i, encoding)


def _grouped_sort(u: Any, i: Any) -> tuple[Any, Any] | None:
    """``(u, i)`` stably sorted by ``u`` by moving whole runs, when each value of ``u`` forms
    one contiguous run (ratings files grouped by user, as ML-20m's are): O(n) instead of a sort;
    else None."""
    xp = array_module(u)
    starts = xp.concatenate([xp.zeros(1, xp.int64), xp.flatnonzero(u[1:] != u[:-1]) + 1])
    run_users = u[starts]
    by_user = xp.argsort(run_users)  # [runs], small: one entry per user
    if bool((run_users[by_user[1:]] == run_users[by_user[:-1]]).any()):
        return None  # a user in two runs: not grouped
    ends = xp.concatenate([starts[1:], xp.asarray([u.size], dtype=xp.int64)])
    first, size = starts[by_user], (ends - starts)[by_user]
    if xp is np and size.size * RUN_COPY_MIN_LENGTH <= u.size:
        # A copy of each run, in user order: no index array over the rows (a Python loop over
        # the runs, so only where runs are long on average).
        i = np.concatenate(
            [i[a : a + n] for a, n in zip(first.tolist(), size.tolist(), strict=True)]
        )
    else:
        # Row j of the output comes from first[run] + (j - the run's start in the output).
        shift = first - (xp.cumsum(size) - size)
        i = i[repeat(shift, size) + xp.arange(u.size, dtype=xp.int64)]
    return repeat(run_users[by_user], size), i


def _model_ids(u_idx: Any, i_idx: Any, encoding: Encoding) -> tuple[np.ndarray, np.ndarray]:
    """Host int64 model ids from dense indices (``lo + index``)."""
    user, item = to_numpy(u_idx).astype(np.int64), to_numpy(i_idx).astype(np.int64)
    user += encoding.user.lo  # in place: no second copy of a split's rows
    item += encoding.item.lo
    return user, item
