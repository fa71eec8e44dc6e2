"""Leave-one-out ranking metrics: HR@K and NDCG@K of one held-out item among sampled negatives.

Pure functions of scores. Ties between the held-out item and a negative are resolved as the
expected value over a uniformly random order of the tied items: a constant scorer gets the HR of a
random ranking (K / (N + 1)) rather than 0 or 1, and ItemPop's many equal counts are scored fairly.
"""

from __future__ import annotations

import torch


def rank_counts(
    pos_scores: torch.Tensor, neg_scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Negatives scored above, and tied with, each held-out item.

    Parameters
    ----------
    pos_scores
        ``[U]`` score of each user's held-out item.
    neg_scores
        ``[U, N]`` scores of the user's negatives.

    Returns
    -------
    (greater, ties)
        int64 ``[U]`` each.
    """
    pos = pos_scores.unsqueeze(1)  # [U, 1]
    greater = (neg_scores > pos).sum(1)
    ties = (neg_scores == pos).sum(1)
    return greater, ties


def hit_ndcg(
    pos_scores: torch.Tensor, neg_scores: torch.Tensor, k: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-user HR@k and NDCG@k (float64 ``[U]`` each; means are the reported metrics).

    With ``g`` negatives above the item and ``t`` tied, the item's 0-based position is uniform in
    ``g .. g + t``: ``HR = P(position < k)`` and ``NDCG = E[1 / log2(position + 2); position < k]``.
    A NaN held-out score is a miss.
    """
    if k < 1:
        raise ValueError(f"top-k={k}: must be >= 1")
    greater, ties = rank_counts(pos_scores, neg_scores)
    g = greater.unsqueeze(1)  # [U, 1]
    positions = torch.arange(k, device=pos_scores.device)  # [k]
    inside = (positions >= g) & (positions <= g + ties.unsqueeze(1))  # [U, k]
    gain = 1.0 / torch.log2(positions.double() + 2.0)  # [k]
    denom = (ties + 1).double()
    hr = inside.sum(1).double() / denom
    ndcg = (inside.double() * gain).sum(1) / denom
    miss = torch.isnan(pos_scores)
    return hr.masked_fill(miss, 0.0), ndcg.masked_fill(miss, 0.0)


def item_popularity(train_items: torch.Tensor, num_items: int) -> torch.Tensor:
    """ItemPop scores: training interactions per item, float64 ``[num_items]``."""
    return torch.bincount(train_items.long(), minlength=num_items).double()


def itempop_hit_ndcg(
    popularity: torch.Tensor, test_items: torch.Tensor, eval_negatives: torch.Tensor, k: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-user HR@k / NDCG@k of ranking by popularity (``popularity [num_items]``)."""
    return hit_ndcg(popularity[test_items.long()], popularity[eval_negatives.long()], k)
