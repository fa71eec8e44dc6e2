"""The metric suite (HR, NDCG, MRR, Precision, MAP at 5/10/20), coverage and average popularity:
against brute-force references on small random data, ties included; and `ncf evaluate --suite`'s
per-user file on a trained checkpoint."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from ncf.models.metrics import coverage_popularity, metric_suite, rank_counts


def _ranked_lists(pos: float, negs: list[float]):
    """Every ordering of the candidates that respects the scores (tied ones in every order),
    as lists of relevance flags (1 = the held-out item), best first."""
    groups: dict[float, list[int]] = {}
    for score, rel in [(pos, 1)] + [(n, 0) for n in negs]:
        groups.setdefault(score, []).append(rel)
    ordered = [groups[s] for s in sorted(groups, reverse=True)]
    for perms in itertools.product(*(set(itertools.permutations(g)) for g in ordered)):
        yield [rel for group in perms for rel in group]


def _reference(relevance: list[int], k: int) -> dict[str, float]:
    """The textbook definitions, as RecBole computes them, for one ranked list."""
    top = relevance[:k]
    first = next((i for i, r in enumerate(top) if r), None)
    n_rel = sum(relevance)
    precisions = [sum(top[: i + 1]) / (i + 1) for i in range(len(top))]
    return {
        "hr": float(any(top)),
        "ndcg": sum(r / math.log2(i + 2) for i, r in enumerate(top)) / 1.0,  # IDCG = 1
        "mrr": 0.0 if first is None else 1.0 / (first + 1),
        "precision": sum(top) / k,
        "map": sum(p * r for p, r in zip(precisions, top, strict=True)) / min(k, n_rel),
    }


@pytest.mark.parametrize("seed", range(6))
def test_suite_equals_the_brute_force_expectation_over_tied_orders(seed: int) -> None:
    rng = np.random.default_rng(seed)
    users, n_neg = 12, int(rng.integers(3, 25))
    # few distinct values: many ties, also with the held-out item
    pos = rng.integers(0, 6, users).astype(np.float64)
    negs = rng.integers(0, 6, (users, n_neg)).astype(np.float64)
    greater, ties = rank_counts(torch.tensor(pos), torch.tensor(negs))
    suite = metric_suite(greater, ties, ks=(1, 5, 10, 20))
    for u in range(users):
        lists = list(_ranked_lists(pos[u], list(negs[u])))
        for k in (1, 5, 10, 20):
            want = {m: np.mean([_reference(r, k)[m] for r in lists]) for m in _reference([1], 1)}
            got = {m: float(suite[f"{m}@{k}"][u]) for m in want}
            assert_close(got, want, rtol=0, atol=1e-12)


def test_suite_refuses_a_cut_off_below_one() -> None:
    with pytest.raises(ValueError, match="each K must be >= 1"):
        metric_suite(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), ks=(0,))


def test_coverage_and_popularity_of_top_lists() -> None:
    top = torch.tensor([[0, 2, 3], [2, 0, 1]])  # two users' best three catalogue columns
    popularity = torch.tensor([10.0, 1.0, 5.0, 0.0, 7.0], dtype=torch.float64)
    out = coverage_popularity(top, popularity, ks=(1, 3))
    assert out["hit@1"].tolist() == [True, False, True, False, False]
    assert out["hit@3"].tolist() == [True, True, True, True, False]
    assert_close(out["pop_sum@1"], torch.tensor(15.0, dtype=torch.float64))
    assert_close(out["pop_sum@3"], torch.tensor(31.0, dtype=torch.float64))


def test_full_ranks_rank_a_held_out_item_that_is_also_known():
    """A repeated interaction: the held-out item is among the user's known items. It is still
    ranked (as the headline full ranking does), against the unknown items only."""
    from types import SimpleNamespace

    from ncf.models.distributed import DistEnv
    from ncf.models.ranks import MISS, full_ranks

    data = SimpleNamespace(
        item_range=(0, 4), num_users=1, test_users=torch.tensor([0]), test_items=torch.tensor([2]),
        train_items=torch.tensor([1, 2]),
    )  # fmt: skip
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.3]])
    env = DistEnv(0, 1, 0, 1, torch.device("cpu"))
    known = (torch.tensor([0, 0]), torch.tensor([1, 2]))
    r = full_ranks(lambda u, i: scores.clone(), data, env, 1024, known, ks=(1, 2))
    assert r["greater"].tolist() == [0] and r["greater"].tolist() != [MISS]  # 0.5 beats 0.1, 0.3
    assert r["candidates"].tolist() == [3]  # items 0 and 3, and the held-out one
    assert float(r["coverage@1"]) == 0.25 and float(r["coverage@2"]) == 0.5  # items 3, then 0
