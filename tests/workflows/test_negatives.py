"""Exact evaluation negatives: distinct, never a positive, uniform, deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.workflows.negatives import check_feasible, sample_negatives


def random_positives(rng: np.random.Generator, n_users: int, n_items: int, n: int):
    """Random distinct positives per user, leaving at least ``n`` free items for each."""
    users, items = [], []
    for u in range(n_users):
        k = int(rng.integers(1, n_items - n + 1))
        users += [u] * k
        items += rng.choice(n_items, k, replace=False).tolist()
    return np.array(users), np.array(items)


@pytest.mark.parametrize("seed", range(6))
def test_negatives_are_distinct_non_positives(seed):
    rng = np.random.default_rng(seed)
    n_users, n_items, n = (
        int(rng.integers(1, 40)),
        int(rng.integers(8, 80)),
        int(rng.integers(1, 7)),
    )
    pu, pi = random_positives(rng, n_users, n_items, n)
    users, items = sample_negatives(pu, pi, n_users, n_items, n, seed)
    assert users.size == n_users * n
    np.testing.assert_array_equal(users, np.repeat(np.arange(n_users), n))  # sorted by user
    for u in range(n_users):
        mine = items[users == u]
        assert len(set(mine.tolist())) == n
        assert not set(mine.tolist()) & set(pi[pu == u].tolist())
        assert ((mine >= 0) & (mine < n_items)).all()


def test_exactly_the_free_items_when_there_are_just_enough():
    # user 0 rated items 0,1,2 of 5 -> its 2 negatives must be {3, 4}; user 1 rated 0,3,4 -> {1, 2}
    users, items = sample_negatives(
        np.array([0, 0, 0, 1, 1, 1]), np.array([0, 1, 2, 0, 3, 4]), 2, 5, 2, 0
    )
    assert sorted(items[users == 0].tolist()) == [3, 4]
    assert sorted(items[users == 1].tolist()) == [1, 2]


def test_same_seed_same_output_other_seed_other_output():
    rng = np.random.default_rng(0)
    pu, pi = random_positives(rng, 50, 300, 20)
    a = sample_negatives(pu, pi, 50, 300, 20, 7)
    b = sample_negatives(pu, pi, 50, 300, 20, 7)
    c = sample_negatives(pu, pi, 50, 300, 20, 8)
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


def test_uniform_over_the_free_items():
    # One user, 10 items, positives {0, 1}, 3 negatives: each free item has probability 3/8.
    trials = 3000
    hits = np.zeros(10)
    for seed in range(trials):
        _, items = sample_negatives(np.array([0, 0]), np.array([0, 1]), 1, 10, 3, seed)
        hits[items] += 1
    freq = hits / trials
    assert freq[:2].sum() == 0
    # Binomial std of a frequency here is sqrt(3/8 * 5/8 / 3000) ~ 0.009: allow 4.5 std.
    np.testing.assert_allclose(freq[2:], 3 / 8, atol=0.04)


def test_many_rounds_for_a_user_with_few_free_items():
    # 2,000 items, the user rated all but 5, and needs all 5: most draws are rejected.
    rated = np.arange(5, 2000)
    users, items = sample_negatives(np.zeros(rated.size, dtype=np.int64), rated, 1, 2000, 5, 3)
    assert sorted(items.tolist()) == [0, 1, 2, 3, 4]


def test_infeasible_requests_name_the_user():
    with pytest.raises(
        ValueError, match=r"user 42 interacted with 4 of the 6 items, leaving 2 < 3"
    ):
        check_feasible(np.array([1, 4]), 6, 3, user_ids=np.array([41, 42]))
    with pytest.raises(ValueError, match=r"only 3 distinct items remain.*at most 2"):
        check_feasible(np.array([1]), 3, 5)
    with pytest.raises(ValueError, match=r"--eval-negatives must be >= 1"):
        check_feasible(np.array([1]), 3, 0)


def test_huge_item_range_takes_the_argsort_path():
    # user * n_items + item no longer fits next to a draw position in one int64: the stable
    # argsort fallback must give the same guarantees.
    n_items = 2**60
    pu, pi = np.array([0, 0, 1]), np.array([5, 2**59, 7])
    users, items = sample_negatives(pu, pi, 2, n_items, 4, 0)
    np.testing.assert_array_equal(users, [0, 0, 0, 0, 1, 1, 1, 1])
    for u in (0, 1):
        mine = items[users == u].tolist()
        assert len(set(mine)) == 4 and not set(mine) & set(pi[pu == u].tolist())


@pytest.mark.parametrize("parts", [2, 3, 8])
def test_a_partition_of_users_draws_what_the_whole_draws_for_them(parts):
    # Each user's stream is seeded by its key: sampling users in disjoint groups, each group with
    # its own local indices and the users' global ids as keys, gives every user the negatives
    # that one draw over all users gives it.
    rng = np.random.default_rng(11)
    n_users, n_items, n = 40, 60, 9
    pu, pi = random_positives(rng, n_users, n_items, n)
    whole_u, whole_i = sample_negatives(pu, pi, n_users, n_items, n, 5)
    group = rng.integers(0, parts, n_users)
    for g in range(parts):
        members = np.flatnonzero(group == g)  # global ids of this partition's users
        local = np.full(n_users, -1)
        local[members] = np.arange(members.size)
        rows = np.isin(pu, members)
        users, items = sample_negatives(
            local[pu[rows]], pi[rows], members.size, n_items, n, 5, user_keys=members
        )
        np.testing.assert_array_equal(members[users], whole_u[np.isin(whole_u, members)])
        np.testing.assert_array_equal(items, whole_i[np.isin(whole_u, members)])


def test_user_draws_hand_checked():
    # SplitMix64 of state s + k * GAMMA, top 53 bits scaled to the range: one draw by hand.
    from ncf.workflows.negatives import GAMMA, MIX1, MIX2, user_draws

    mask = (1 << 64) - 1
    s, k, n_items = 12345, 7, 1000
    z = (s + k * GAMMA) & mask
    z = ((z ^ (z >> 30)) * MIX1) & mask
    z = ((z ^ (z >> 27)) * MIX2) & mask
    z ^= z >> 31
    expected = ((z >> 11) * n_items) >> 53
    got = user_draws(np.array([s], dtype=np.uint64), np.array([k]), n_items)
    assert got.tolist() == [expected]
