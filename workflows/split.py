"""Pure interaction filtering and leave-one-out split (no NVTabular import; numpy or cupy arrays).

Rules (documented in the README and recorded in ``metadata.json``):

1. Duplicate (user, item) pairs: only the latest rating of the pair is kept (ties on timestamp:
   the one later in the file). Every kept rating is one positive interaction.
2. Users with fewer than ``min_ratings`` kept interactions are dropped, with all their rows.
3. Leave-one-out by time: each user's test item is their latest interaction. Ties on timestamp
   (``--ties``): ``item-id`` gives them to the larger raw ``movieId`` (then the later row), so the
   split depends neither on the order of the file nor on how ids are encoded; ``file-order`` gives
   them to the later line of the input file. With ``--holdout valid,test`` the validation item is
   the latest of the remaining interactions, by the same rule.

The functions take the column arrays of a pandas or cuDF frame (``df[col].values``) and return
boolean masks, so the caller decides how to index its frame.
"""

from __future__ import annotations

from typing import Any

from ncf.workflows.backend import array_module, dense_codes, group_max


def pair_keys(user: Any, item: Any) -> Any:
    """One int64 key per (user, item): ``user * (max(item) + 1) + item`` (ids must be in [0, 2**31))."""
    xp = array_module(user, item)
    width = int(item.max()) + 1 if item.size else 1
    return user.astype(xp.int64) * width + item.astype(xp.int64, copy=False)


def latest_of_duplicates(user: Any, item: Any, time: Any) -> Any:
    """Mask keeping one row per (user, item) pair: the latest by ``time``, then the last in order.

    Parameters
    ----------
    user, item
        Non-negative integer ids, shape ``[n]``.
    time
        Timestamps, shape ``[n]``.

    Returns
    -------
    array
        bool, shape ``[n]``: True for kept rows. Without duplicates (ML-20m has none) this costs
        one sort of the int64 pair keys; with duplicates, one more argsort.
    """
    xp = array_module(user, item, time)
    key = pair_keys(user, item)
    keep = xp.ones(key.shape, dtype=bool)
    if key.size < 2:
        return keep
    ordered = xp.sort(key)
    if not bool((ordered[1:] == ordered[:-1]).any()):
        return keep
    # Duplicates exist: group equal keys with an argsort (order among equal keys is irrelevant:
    # the kept row is chosen by (time, row) below).
    order = xp.argsort(key)
    ordered = key[order]
    starts = xp.ones(key.shape, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    run = xp.cumsum(starts) - 1  # pair index of each sorted row
    in_dup = xp.bincount(run)[run] > 1
    rows, group = order[in_dup], run[in_dup]  # rows of duplicated pairs and their pair index
    n_groups = int(run[-1]) + 1
    # Per pair, the latest time, then the last row at that time: two O(n) scatters.
    t = time[rows]
    latest = group_max(t, group, n_groups, -(2**63))
    at_latest = t == latest[group]
    last_row = group_max(rows[at_latest], group[at_latest], n_groups, -1)
    keep[rows] = False
    keep[last_row[last_row >= 0]] = True
    return keep


def min_count_mask(user: Any, min_count: int) -> tuple[Any, int]:
    """Mask of rows whose user has at least ``min_count`` rows, and the number of users dropped.

    Parameters
    ----------
    user
        Non-negative user ids, shape ``[n]``.
    min_count
        Minimum number of rows a user needs to be kept.

    Returns
    -------
    mask, dropped_users
        bool ``[n]``; int.
    """
    xp = array_module(user)
    codes, uniques = dense_codes(user)
    counts = xp.bincount(codes, minlength=uniques.size)
    return counts[codes] >= min_count, int((counts < min_count).sum())


def leave_one_out(user: Any, tie_item: Any, time: Any, n_users: int) -> Any:
    """Mask of the test rows: per user the latest ``time``, ties to the larger ``tie_item``, then row.

    Parameters
    ----------
    user
        Dense user index in ``[0, n_users)``, shape ``[n]``; every user has at least one row.
    tie_item
        Tie-break value per row, shape ``[n]``: the raw ``movieId`` (``--ties item-id``) or the
        row's line number in the input file (``--ties file-order``).
    time
        Timestamps, shape ``[n]``.
    n_users
        Number of users.

    Returns
    -------
    array
        bool ``[n]`` with exactly one True per user: the user's test interaction.
    """
    xp = array_module(user, tie_item, time)
    lowest = -(2**63)
    latest = group_max(time, user, n_users, lowest)
    rows = xp.flatnonzero(time == latest[user])
    best_item = group_max(tie_item[rows], user[rows], n_users, lowest)
    rows = rows[tie_item[rows] == best_item[user[rows]]]
    # With duplicates removed one row is left per user; the row index makes it exact regardless.
    best_row = group_max(rows, user[rows], n_users, lowest)
    test = xp.zeros(user.shape, dtype=bool)
    test[best_row] = True
    return test


def hold_out_latest(user: Any, tie: Any, time: Any, n_users: int, n_held: int) -> list[Any]:
    """Masks of each user's ``n_held`` latest rows: ``[test, valid, ...]`` (latest first).

    Each mask is :func:`leave_one_out` of the rows the earlier masks left: held-out rows get the
    lowest timestamp, so they can no longer be a user's latest. The loop runs over the held-out
    splits (one or two), never over users; the first mask is exactly :func:`leave_one_out`.

    Parameters
    ----------
    user
        Dense user index in ``[0, n_users)``, shape ``[n]``; every user has at least ``n_held``
        rows (the ETL's minimum-interactions filter guarantees it).
    tie, time
        Tie-break values and int64 timestamps, shape ``[n]`` (see :func:`leave_one_out`).
    n_users
        Number of users.
    n_held
        Held-out interactions per user: 1 (``--holdout test``) or 2 (``--holdout valid,test``).

    Returns
    -------
    list of array
        ``n_held`` disjoint bool masks ``[n]``, each with exactly one True per user.
    """
    xp = array_module(user, tie, time)
    masks = [leave_one_out(user, tie, time, n_users)]
    for _ in range(n_held - 1):
        # Timestamps are non-negative (read_ratings checks), so every row left beats these.
        time = xp.where(masks[-1], -(2**63), time)
        mask = leave_one_out(user, tie, time, n_users)
        if bool((mask & (time == -(2**63))).any()):
            raise RuntimeError("hold_out_latest: a user has fewer rows than held-out splits")
        masks.append(mask)
    return masks
