"""Exact evaluation negatives by vectorized rejection sampling (no NVTabular; numpy or cupy).

For every user, ``n`` distinct items drawn uniformly from the items the user never interacted
with (train or test). The loop runs over *rounds*, never over users:

1. every user still short draws a batch of candidate items uniformly in ``[0, n_items)``, sized
   from how many they still need and how much of the catalogue is free for them;
2. candidates that are positives of their user are rejected (anti-join: binary search of the
   int64 key ``user * n_items + item`` in the sorted positive keys), and so are candidates already
   accepted in an earlier round;
3. within the round, repeated candidates of a user keep only their first draw (one sort of
   ``key * width + draw position``);
4. each user keeps the first accepted candidates in draw order, up to what it still needs.

Keeping the first distinct accepted draws is sequential sampling without replacement, so each
user's negatives are a uniform random subset of its free items, in draw order. The generator
is seeded and the rounds are deterministic: same inputs and seed, same output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ncf.workflows.backend import array_module, default_rng, member, repeat, stable_argsort

MAX_ROUNDS = 200  # each round at least halves the shortfall in expectation; never reached


def check_feasible(counts: Any, n_items: int, n: int, user_ids: Any | None = None) -> None:
    """Raise ValueError unless every user has at least ``n`` items it never interacted with.

    Parameters
    ----------
    counts
        Distinct positive items per user, shape ``[n_users]``.
    n_items
        Number of items that can be drawn.
    n
        Negatives requested per user.
    user_ids
        Raw user id per row of ``counts`` (for the message); defaults to the index.
    """
    if n < 1:
        raise ValueError(f"--eval-negatives must be >= 1, got {n}")
    if n_items < n + 1:
        raise ValueError(
            f"only {n_items} distinct items remain after filtering, too few to draw {n} negatives "
            f"per user plus the test item; lower --eval-negatives to at most {max(n_items - 1, 0)}"
        )
    free = n_items - counts
    short = np.flatnonzero(np.asarray(_host(free)) < n)
    if short.size:
        first = int(short[0])
        who = int(_host(user_ids)[first]) if user_ids is not None else first
        raise ValueError(
            f"user {who} interacted with {int(_host(counts)[first])} of the {n_items} items, "
            f"leaving {int(_host(free)[first])} < {n} to draw negatives from "
            f"({short.size} user(s) affected); lower --eval-negatives"
        )


def _host(a: Any) -> Any:
    return a.get() if type(a).__module__.startswith("cupy") else a


def sample_negatives(
    pos_user: Any, pos_item: Any, n_users: int, n_items: int, n: int, seed: int
) -> tuple[Any, Any]:
    """Draw ``n`` distinct negatives for every user in ``[0, n_users)``.

    Parameters
    ----------
    pos_user, pos_item
        Every positive interaction (train and test), dense ids: users in ``[0, n_users)``,
        items in ``[0, n_items)``, shape ``[n_pos]``.
    n_users, n_items
        Id ranges.
    n
        Negatives per user.
    seed
        Generator seed.

    Returns
    -------
    users, items
        int64 arrays of shape ``[n_users * n]``, sorted by user; within a user, draw order.
    """
    xp = array_module(pos_user, pos_item)
    pos_keys = xp.unique(pos_user.astype(xp.int64) * n_items + pos_item)  # sorted, [n_pos]
    counts = xp.bincount(pos_keys // n_items, minlength=n_users)  # distinct positives per user
    check_feasible(counts, n_items, n)
    rng = default_rng(xp, seed)
    have = xp.zeros(n_users, dtype=xp.int64)
    active = xp.arange(n_users, dtype=xp.int64)
    rounds: list[tuple[Any, Any]] = []  # accepted (user, item) of each round, sorted by user
    taken = xp.zeros(0, dtype=xp.int64)  # sorted keys accepted earlier for still-active users
    for _ in range(MAX_ROUNDS):
        users, items = _round(
            rng, active, n - have[active], counts[active] + have[active], pos_keys, taken, n_items
        )
        rounds.append((users, items))
        have += xp.bincount(users, minlength=n_users)
        active = xp.flatnonzero(have < n)
        if active.size == 0:
            return _merge_rounds(xp, rounds, n_users)
        short = have < n
        keys = [u[short[u]] * n_items + i[short[u]] for u, i in rounds]
        taken = xp.sort(xp.concatenate(keys))
    raise RuntimeError(f"negative sampling did not finish in {MAX_ROUNDS} rounds")


def _round(rng, active, need, blocked, pos_keys, taken, n_items):
    """One rejection round for the ``active`` users; returns their accepted (user, item) pairs.

    ``need`` and ``blocked`` (positives + already accepted) are per active user, ``[n_active]``.
    """
    xp = array_module(active)
    # Expected acceptance is (n_items - blocked) / n_items; a few standard deviations of margin
    # let almost every user finish in this round.
    need_f = need.astype(xp.float64)
    free = (n_items - blocked).astype(xp.float64)
    draws = xp.ceil((need_f + 2.0 * xp.sqrt(need_f) + 2.0) * n_items / free).astype(xp.int64)
    user = repeat(active, draws)  # [n_draws], one block per user
    item = rng.integers(0, n_items, size=int(draws.sum()), dtype=xp.int64)
    start = xp.cumsum(draws) - draws  # first slot of each block, [n_active]
    key, row = _sorted_draws(user * n_items + item, start, draws, active, n_items)
    # In key order: reject repeats of a key (the earlier draw of a (user, item) pair comes
    # first), positives and earlier rounds' negatives. Sorted needles make the binary searches
    # cache-friendly (30x faster than random order on 16M keys).
    ok_sorted = xp.ones(key.shape, dtype=bool)
    ok_sorted[1:] = key[1:] != key[:-1]
    ok_sorted &= ~member(pos_keys, key) & ~member(taken, key)
    ok = xp.zeros(key.shape, dtype=bool)
    ok[row] = ok_sorted  # back to draw order
    # Rank of each accepted draw inside its block (1-based); keep the first `need` of them.
    csum = xp.cumsum(ok)
    before = csum[start] - ok[start]  # accepted draws before each block
    take = ok & (csum - repeat(before, draws) <= repeat(need, draws))
    return user[take], item[take]


def _sorted_draws(key: Any, start: Any, draws: Any, active: Any, n_items: int) -> tuple[Any, Any]:
    """Sort draws by (key, draw position); return the sorted keys and their rows in draw order."""
    xp = array_module(key)
    width = 1 << int(draws.max()).bit_length()  # power of two > every position in a block
    if int(key.max()) < (2**62) // width:
        # (key, position in block) packed in one int64: a plain sort, cheaper than an argsort.
        slot = xp.arange(key.size, dtype=xp.int64) - repeat(start, draws)
        packed = xp.sort(key * width + slot)
        key = packed // width
        # Row = first slot of the key's user block + position; block of a user via a table.
        block = xp.full(int(active[-1]) + 1, -1, dtype=xp.int64)
        block[active] = start
        return key, block[key // n_items] + packed % width
    order = stable_argsort(key)  # huge id ranges: keeps draw order among equal keys
    return key[order], order


def _merge_rounds(xp: Any, rounds: list[tuple[Any, Any]], n_users: int) -> tuple[Any, Any]:
    """Concatenate per-round results into one user-sorted list, draw order kept within a user."""
    users = xp.concatenate([r[0] for r in rounds])
    items = xp.concatenate([r[1] for r in rounds])
    if len(rounds) > 1:
        # Rounds are in draw order: a stable sort by user keeps that order inside each user.
        size = users.size
        if n_users < 2**62 // size:
            order = xp.sort(users * size + xp.arange(size, dtype=xp.int64)) % size
        else:
            order = stable_argsort(users)
        users, items = users[order], items[order]
    return users, items
