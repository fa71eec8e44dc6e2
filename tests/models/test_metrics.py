"""HR@K / NDCG@K against hand-computed cases, ties included."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from ncf.models.metrics import hit_ndcg, item_popularity, itempop_hit_ndcg, rank_counts


def _one(pos: float, negs: list[float], k: int = 10) -> tuple[float, float]:
    hr, ndcg = hit_ndcg(torch.tensor([pos]), torch.tensor([negs]), k)
    return float(hr[0]), float(ndcg[0])


@pytest.mark.parametrize(
    ("pos", "negs", "k", "hr", "ndcg"),
    [
        (0.9, [0.1, 0.2, 0.3], 10, 1.0, 1.0),  # ranked first
        (0.5, [0.9, 0.8, 0.7, 0.1], 10, 1.0, 1.0 / math.log2(5)),  # 3 above: position 3
        (0.5, [0.9, 0.8, 0.7, 0.1], 3, 0.0, 0.0),  # position 3 is outside the top 3
        (0.5, [0.9, 0.8, 0.1], 3, 1.0, 1.0 / math.log2(4)),  # position 2, last of the top 3
        (0.5, [0.5, 0.1], 1, 0.5, 0.5),  # tie for first: top-1 half the time, gain 1
        # 9 above, 2 tied: position 9, 10 or 11 -> in the top 10 one time in three
        (0.5, [0.9] * 9 + [0.5, 0.5] + [0.1] * 5, 10, 1 / 3, (1 / math.log2(11)) / 3),
        # 1 above, 1 tied: positions 1 or 2, both in the top 10
        (0.5, [0.6, 0.5, 0.0], 10, 1.0, (1 / math.log2(3) + 1 / math.log2(4)) / 2),
    ],
)
def test_hand_computed(pos, negs, k, hr, ndcg):
    got_hr, got_ndcg = _one(pos, negs, k)
    assert got_hr == pytest.approx(hr, abs=1e-12)
    assert got_ndcg == pytest.approx(ndcg, abs=1e-12)


def test_constant_scorer_gets_random_ranking_hr():
    """All 100 items tied: the held-out item is anywhere, HR@10 = 10 / 100."""
    hr, ndcg = hit_ndcg(torch.zeros(4), torch.zeros(4, 99), 10)
    assert_close(hr, torch.full((4,), 0.1, dtype=torch.float64))
    expected = sum(1 / math.log2(p + 2) for p in range(10)) / 100
    assert_close(ndcg, torch.full((4,), expected, dtype=torch.float64))


def test_batch_of_users_and_nan_is_a_miss():
    pos = torch.tensor([0.9, 0.2, float("nan")])
    negs = torch.tensor([[0.1, 0.5], [0.3, 0.4], [0.1, 0.2]])
    hr, ndcg = hit_ndcg(pos, negs, 2)
    assert_close(hr, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert_close(ndcg, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    greater, ties = rank_counts(pos[:2], negs[:2])
    assert greater.tolist() == [0, 2] and ties.tolist() == [0, 0]


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="top-k=0"):
        hit_ndcg(torch.zeros(1), torch.zeros(1, 3), 0)


def test_itempop_by_hand():
    # item 3 seen 3 times, item 4 twice, item 5 once, items 0-2 never
    pop = item_popularity(torch.tensor([3, 3, 3, 4, 4, 5], dtype=torch.int32), num_items=6)
    assert pop.tolist() == [0, 0, 0, 3, 2, 1]
    test_items = torch.tensor([4, 0])
    negs = torch.tensor([[3, 5], [1, 2]])
    hr, ndcg = itempop_hit_ndcg(pop, test_items, negs, k=1)
    # user 0: item 4 (2) below item 3 (3): miss at k=1. user 1: three-way tie at 0: 1/3.
    assert_close(hr, torch.tensor([0.0, 1 / 3], dtype=torch.float64))
    assert_close(ndcg, torch.tensor([0.0, 1 / 3], dtype=torch.float64))
