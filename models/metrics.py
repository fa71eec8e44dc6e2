"""Leave-one-out ranking metrics of one held-out item per user: HR, NDCG, MRR, Precision and MAP
at K (``metric_suite``), item coverage and average popularity of the top-K lists.

Two candidate sets: the ETL's sampled negatives (``hit_ndcg``), or every item the user has not
interacted with in training (full ranking: ``full_rank_counts``). Pure functions of scores.

Tie rule (both): ties between the held-out item and another candidate are resolved as the expected
value over a uniformly random order of the tied items. A constant scorer gets the HR of a random
ranking (K / (N + 1)) rather than 0 or 1, and ItemPop's many equal counts are scored fairly. A held-out
score of NaN is a miss (HR, NDCG and MRR 0).
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


def ranking_metrics(
    greater: torch.Tensor, ties: torch.Tensor, k: int = 10
) -> dict[str, torch.Tensor]:
    """Per-user HR@k, NDCG@k and MRR (float64 ``[U]`` each) from the candidates' rank counts.

    With ``g`` candidates scored above the held-out item and ``t`` tied with it, the item's 0-based
    position is uniform in ``g .. g + t``: ``HR = P(position < k)``,
    ``NDCG = E[1 / log2(position + 2); position < k]`` and ``MRR = E[1 / (position + 1)]`` (no
    cut-off). With one held-out item per user, HR@k is also Recall@k.
    """
    if k < 1:
        raise ValueError(f"top-k={k}: must be >= 1")
    g = greater.unsqueeze(1)  # [U, 1]
    positions = torch.arange(k, device=greater.device)  # [k]
    inside = (positions >= g) & (positions <= g + ties.unsqueeze(1))  # [U, k]
    gain = 1.0 / torch.log2(positions.double() + 2.0)  # [k]
    denom = (ties + 1).double()
    # sum_{p=g}^{g+t} 1/(p+1) = H(g+t+1) - H(g), and H(n) = digamma(n+1) + Euler's constant.
    gd, td = greater.double(), ties.double()
    spread = (torch.special.digamma(gd + td + 2.0) - torch.special.digamma(gd + 1.0)) / denom
    mrr = torch.where(ties == 0, 1.0 / (gd + 1.0), spread)  # exact when there is no tie
    return {
        "hr": inside.sum(1).double() / denom,
        "ndcg": (inside.double() * gain).sum(1) / denom,
        "mrr": mrr,
    }


SUITE_KS = (5, 10, 20)  # the cut-offs of ``metric_suite``, as RecBole reports them
SUITE_METRICS = ("hr", "ndcg", "mrr", "precision", "map")


def metric_suite(
    greater: torch.Tensor, ties: torch.Tensor, ks: tuple[int, ...] = SUITE_KS
) -> dict[str, torch.Tensor]:
    """Per-user ``hr@K``, ``ndcg@K``, ``mrr@K``, ``precision@K`` and ``map@K`` (float64 ``[U]``
    each) for every K of ``ks``, from the rank counts (``rank_counts`` / ``full_rank_counts``).

    With one relevant item at 0-based position ``p``: HR@K = [p < K], NDCG@K = [p < K] /
    log2(p + 2), MRR@K = [p < K] / (p + 1), Precision@K = [p < K] / K and MAP@K = MRR@K (the
    precision at the one hit, over min(K, 1) relevant items); each is its expectation over the
    tied positions (``ranking_metrics``).
    """
    if not ks or min(ks) < 1:
        raise ValueError(f"cut-offs {ks}: each K must be >= 1")
    kmax = max(ks)
    g, t = greater.unsqueeze(1), ties.unsqueeze(1)  # [U, 1]
    positions = torch.arange(kmax, device=greater.device)  # [kmax]
    weight = ((positions >= g) & (positions <= g + t)).double() / (t + 1).double()  # P(p = pos)
    gains = {
        "hr": torch.ones(kmax, dtype=torch.float64, device=greater.device),
        "ndcg": 1.0 / torch.log2(positions.double() + 2.0),
        "mrr": 1.0 / (positions.double() + 1.0),
    }
    out = {}
    for k in ks:
        w = weight[:, :k]  # [U, k]
        part = {name: (w * gain[:k]).sum(1) for name, gain in gains.items()}
        part["precision"] = part["hr"] / k
        part["map"] = part["mrr"]
        out |= {f"{name}@{k}": part[name] for name in SUITE_METRICS}
    return out


def coverage_popularity(
    top: torch.Tensor, popularity: torch.Tensor, ks: tuple[int, ...] = SUITE_KS
) -> dict[str, torch.Tensor]:
    """Sums, over a chunk of users' top-K lists, for item coverage and average popularity.

    Parameters
    ----------
    top
        int64 ``[U, max(ks)]`` catalogue columns of each user's best items, best first.
    popularity
        float64 ``[C]`` training interactions of each catalogue column.

    Returns
    -------
    dict
        ``hit@K`` bool ``[C]`` (recommended to some user of the chunk) and ``pop_sum@K`` (float64
        scalar: the summed popularity of the chunk's top-K items) for every K.
    """
    out = {}
    for k in ks:
        hit = torch.zeros(popularity.numel(), dtype=torch.bool, device=top.device)
        hit[top[:, :k].reshape(-1)] = True
        out[f"hit@{k}"] = hit
        out[f"pop_sum@{k}"] = popularity[top[:, :k]].sum()
    return out


def hit_ndcg(
    pos_scores: torch.Tensor, neg_scores: torch.Tensor, k: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-user HR@k and NDCG@k among sampled negatives (float64 ``[U]`` each).

    ``pos_scores [U]`` scores the held-out items, ``neg_scores [U, N]`` the users' negatives;
    the means over users are the reported metrics. Ties: see ``ranking_metrics``.
    """
    greater, ties = rank_counts(pos_scores, neg_scores)
    m = ranking_metrics(greater, ties, k)
    miss = torch.isnan(pos_scores)
    return m["hr"].masked_fill(miss, 0.0), m["ndcg"].masked_fill(miss, 0.0)


def seen_csr(
    users: torch.Tensor, items: torch.Tensor, num_users: int, item_lo: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each user's known items as CSR, for masking them out of a full ranking.

    Parameters
    ----------
    users, items
        ``[P]`` interactions (typically the training positives).
    num_users
        Rows of the CSR (user ids are in ``[0, num_users)``).
    item_lo
        First id of the item range; columns are ``item - item_lo``.

    Returns
    -------
    (indptr, cols)
        int64 ``[num_users + 1]`` and ``[P]``: user ``u``'s columns are ``cols[indptr[u]:indptr[u+1]]``.
    """
    users = users.long()
    order = torch.argsort(users, stable=True)
    cols = items.long()[order] - item_lo
    indptr = torch.zeros(num_users + 1, dtype=torch.int64, device=users.device)
    indptr[1:] = torch.cumsum(torch.bincount(users, minlength=num_users), 0)
    return indptr, cols


def mask_seen(
    scores: torch.Tensor, users: torch.Tensor, indptr: torch.Tensor, cols: torch.Tensor
) -> None:
    """Set ``scores[r, c] = -inf`` for every known column ``c`` of ``users[r]``, in place.

    One scatter for the whole chunk: the CSR slices of the chunk's users are gathered with
    index arithmetic (``repeat_interleave``), not a per-user loop.
    """
    starts = indptr[users]
    counts = indptr[users + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return
    rows = torch.repeat_interleave(torch.arange(users.numel(), device=users.device), counts)
    # position in cols of the j-th known item overall = its row's start + its rank within the row
    first = torch.cumsum(counts, 0) - counts
    idx = torch.arange(total, device=users.device) + torch.repeat_interleave(starts - first, counts)
    scores[rows, cols[idx]] = float("-inf")


def full_rank_counts(
    scores: torch.Tensor,
    pos_cols: torch.Tensor,
    users: torch.Tensor,
    indptr: torch.Tensor,
    cols: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank counts of each held-out item among every item its user has not interacted with.

    Parameters
    ----------
    scores
        ``[U, C]`` score of every item of the item range for a chunk of users. Modified in place
        (known items and the held-out item are set to ``-inf``).
    pos_cols
        int64 ``[U]`` column of each user's held-out item. It is ranked even if it is also a known
        item (a repeated interaction).
    users
        int64 ``[U]`` the chunk's user ids (rows of the ``seen_csr`` arrays ``indptr``, ``cols``).

    Returns
    -------
    (greater, ties, pos_scores, candidates)
        Candidates (other unknown items) scored above and equal to the held-out item, its score,
        and the number of candidates including itself; ``[U]`` each.
    """
    rows = torch.arange(users.numel(), device=scores.device)
    pos = scores[rows, pos_cols].clone()
    mask_seen(scores, users, indptr, cols)
    scores[rows, pos_cols] = float("-inf")  # the item is not its own competitor
    candidates = (scores != float("-inf")).sum(1) + 1
    greater = (scores > pos.unsqueeze(1)).sum(1)
    ties = (scores == pos.unsqueeze(1)).sum(1)
    return greater, ties, pos, candidates


def full_ranking_metrics(
    scores: torch.Tensor,
    pos_cols: torch.Tensor,
    users: torch.Tensor,
    indptr: torch.Tensor,
    cols: torch.Tensor,
    k: int = 10,
) -> dict[str, torch.Tensor]:
    """Per-user full-ranking ``hr``, ``ndcg``, ``mrr`` (float64) and ``candidates`` (int64), ``[U]``.

    Arguments as ``full_rank_counts`` (``scores`` is modified in place). ``-inf`` marks excluded
    items, so a held-out score of ``-inf`` or NaN is a miss; ties: see ``ranking_metrics``.
    """
    greater, ties, pos, candidates = full_rank_counts(scores, pos_cols, users, indptr, cols)
    miss = ~(pos > float("-inf"))  # NaN compares false too
    m = {name: v.masked_fill(miss, 0.0) for name, v in ranking_metrics(greater, ties, k).items()}
    m["candidates"] = candidates
    return m


def item_popularity(train_items: torch.Tensor, num_items: int) -> torch.Tensor:
    """ItemPop scores: training interactions per item, float64 ``[num_items]``."""
    return torch.bincount(train_items.long(), minlength=num_items).double()


def itempop_hit_ndcg(
    popularity: torch.Tensor, test_items: torch.Tensor, eval_negatives: torch.Tensor, k: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-user HR@k / NDCG@k of ranking by popularity (``popularity [num_items]``)."""
    return hit_ndcg(popularity[test_items.long()], popularity[eval_negatives.long()], k)
