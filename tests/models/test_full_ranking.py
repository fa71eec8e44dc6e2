"""Full-ranking HR@K / NDCG@K / MRR against a brute-force per-user reference on random data."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from ncf.models.metrics import full_ranking_metrics, hit_ndcg, ranking_metrics, seen_csr


def brute_force(row: list[float], seen: set[int], pos: int, k: int) -> tuple[float, float, float]:
    """One user: candidates are the unseen columns plus the held-out one; ties averaged by hand."""
    others = [c for c in range(len(row)) if c not in seen and c != pos]
    above = sum(1 for c in others if row[c] > row[pos])
    tied = sum(1 for c in others if row[c] == row[pos])
    places = range(above, above + tied + 1)  # equally likely positions of the held-out item
    hr = sum(1.0 for p in places if p < k) / len(places)
    ndcg = sum(1.0 / math.log2(p + 2) for p in places if p < k) / len(places)
    mrr = sum(1.0 / (p + 1) for p in places) / len(places)
    return hr, ndcg, mrr


def random_case(seed: int, ties: bool):
    """Chunk of users (non-contiguous ids), their known items (duplicates too), scores, held-out items."""
    rng = np.random.default_rng(seed)
    num_users, n_items, lo = 15, int(rng.integers(5, 40)), int(rng.integers(0, 4))
    n_pairs = int(rng.integers(0, 4 * n_items))
    users = rng.integers(0, num_users, n_pairs)
    items = rng.integers(lo, lo + n_items, n_pairs)
    chunk = np.sort(rng.choice(num_users, int(rng.integers(1, num_users)), replace=False))
    pos = rng.integers(0, n_items, chunk.size)
    if ties:  # few distinct values: many ties, among them with the held-out item
        scores = rng.integers(0, 4, (chunk.size, n_items)).astype(np.float32)
    else:
        scores = rng.standard_normal((chunk.size, n_items)).astype(np.float32)
    return num_users, lo, users, items, chunk, pos, scores


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("k", [1, 3, 10])
def test_matches_brute_force(seed: int, ties: bool, k: int):
    num_users, lo, users, items, chunk, pos, scores = random_case(seed, ties)
    indptr, cols = seen_csr(torch.from_numpy(users), torch.from_numpy(items), num_users, lo)
    got = full_ranking_metrics(
        torch.from_numpy(scores.copy()),
        torch.from_numpy(pos),
        torch.from_numpy(chunk),
        indptr,
        cols,
        k,
    )
    want = []
    for r, u in enumerate(chunk):
        seen = {int(i) - lo for i in items[users == u]}
        want.append(brute_force(scores[r].tolist(), seen, int(pos[r]), k))
    want_t = torch.tensor(want, dtype=torch.float64)
    assert_close(got["hr"], want_t[:, 0])
    assert_close(got["ndcg"], want_t[:, 1])
    assert_close(got["mrr"], want_t[:, 2])
    n_seen = [
        len({int(i) for i in items[users == u]} - {int(p) + lo})
        for u, p in zip(chunk, pos, strict=True)
    ]
    assert got["candidates"].tolist() == [scores.shape[1] - s for s in n_seen]


@pytest.mark.parametrize("seed", range(5))
def test_distinct_scores_give_the_sorted_position(seed: int):
    """Without ties the position is the held-out item's index in the sorted candidate list."""
    num_users, lo, users, items, chunk, pos, scores = random_case(seed, ties=False)
    indptr, cols = seen_csr(torch.from_numpy(users), torch.from_numpy(items), num_users, lo)
    got = full_ranking_metrics(
        torch.from_numpy(scores.copy()),
        torch.from_numpy(pos),
        torch.from_numpy(chunk),
        indptr,
        cols,
    )
    for r, u in enumerate(chunk):
        seen = {int(i) - lo for i in items[users == u]} - {int(pos[r])}
        ranked = sorted(
            (c for c in range(scores.shape[1]) if c not in seen), key=lambda c: -scores[r, c]
        )
        place = ranked.index(int(pos[r]))
        assert float(got["mrr"][r]) == pytest.approx(1.0 / (place + 1), abs=1e-12)
        assert float(got["hr"][r]) == (1.0 if place < 10 else 0.0)


def test_known_items_are_excluded_and_the_held_out_item_is_ranked():
    # user 1 knows columns 0 and 2 (scored highest) and its held-out column 1 (repeated interaction)
    scores = torch.tensor([[9.0, 5.0, 8.0, 1.0, 0.0]])
    indptr, cols = seen_csr(torch.tensor([1, 1, 1]), torch.tensor([10, 12, 11]), 3, item_lo=10)
    m = full_ranking_metrics(scores, torch.tensor([1]), torch.tensor([1]), indptr, cols, k=1)
    assert m["hr"].tolist() == [1.0] and m["mrr"].tolist() == [1.0]
    assert m["candidates"].tolist() == [3]  # columns 1, 3, 4


def test_nan_and_minus_inf_held_out_scores_are_misses():
    scores = torch.tensor([[float("nan"), 0.0], [float("-inf"), float("-inf")]])
    indptr, cols = seen_csr(torch.tensor([], dtype=torch.int64), torch.tensor([]), 2, 0)
    m = full_ranking_metrics(scores, torch.tensor([0, 0]), torch.tensor([0, 1]), indptr, cols)
    for name in ("hr", "ndcg", "mrr"):
        assert m[name].tolist() == [0.0, 0.0]


def test_mrr_of_a_constant_scorer_is_the_mean_reciprocal_position():
    m = ranking_metrics(torch.tensor([0]), torch.tensor([99]), k=10)
    assert float(m["mrr"][0]) == pytest.approx(sum(1 / p for p in range(1, 101)) / 100, rel=1e-12)


def test_sampled_metrics_unchanged_by_the_shared_tie_rule():
    """hit_ndcg is ranking_metrics over the sampled negatives."""
    pos, negs = torch.tensor([0.5, 0.2]), torch.tensor([[0.5, 0.9, 0.1], [0.3, 0.4, 0.0]])
    hr, ndcg = hit_ndcg(pos, negs, 2)
    assert_close(hr, torch.tensor([0.5, 0.0], dtype=torch.float64))
    assert_close(ndcg, torch.tensor([0.5 / math.log2(3), 0.0], dtype=torch.float64))
