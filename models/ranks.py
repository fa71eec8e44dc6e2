"""Each test user's rank counts, for the metric suite, the per-user file and paired tests.

The rank of a user's held-out item is kept as two counts: candidates scored above it
(``greater``) and tied with it (``ties``); every metric of ``ncf.models.metrics.metric_suite`` is
a function of them. A held-out item whose score is NaN (or, in the full ranking, an excluded
item) is a miss: ``greater = MISS``, beyond every cut-off. Each rank of a torchrun group scores its
contiguous shard of users (``shard_bounds``) and the counts are summed into one ``[U]`` vector on
every rank, so rank 0 sees all users.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch

from ncf.core import names
from ncf.core.atomic import write_bytes
from ncf.models.data import EtlData
from ncf.models.distributed import DistEnv, all_reduce_sum
from ncf.models.epoch import shard_bounds
from ncf.models.metrics import (
    SUITE_KS,
    coverage_popularity,
    full_rank_counts,
    mask_seen,
    metric_suite,
    rank_counts,
    seen_csr,
)

MISS = 2**31 - 1  # greater of a held-out item that cannot be ranked (NaN or excluded score)
CPU_EVAL_CHUNK = 1 << 16  # samples scored at once on a CPU: activations stay cache-sized


def _gathered(shard: torch.Tensor, first: int, total: int, env: DistEnv) -> torch.Tensor:
    """The ``[total]`` vector whose ``[first, first + len(shard))`` is this rank's ``shard``."""
    full = torch.zeros(total, dtype=torch.float64, device=shard.device)
    full[first : first + shard.numel()] = shard.double()
    return all_reduce_sum(full, env).long()


def _chunk(batch_size: int, per_user: int, env: DistEnv) -> int:
    cap = batch_size if env.device.type == "cuda" else min(batch_size, CPU_EVAL_CHUNK)
    return max(1, cap // per_user)


@torch.inference_mode()
def sampled_ranks(
    score, data: EtlData, env: DistEnv, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(greater, ties), int64 ``[U]``: each test user's held-out item among its sampled negatives.

    ``score(users [n], items [n]) -> [n]`` scores pairs (a model's forward, or popularity).
    """
    n_users, n_neg = data.eval_negatives.shape
    first, last = shard_bounds(n_users, env.world_size, env.rank)
    step = _chunk(batch_size, 1 + n_neg, env)
    greater, ties = [], []
    for s in range(first, last, step):
        e = min(s + step, last)
        items = torch.cat((data.test_items[s:e, None], data.eval_negatives[s:e]), dim=1)
        users = data.test_users[s:e].repeat_interleave(1 + n_neg)  # [u * (1 + N)]
        scores = score(users, items.reshape(-1)).float().view(e - s, 1 + n_neg)
        g, t = rank_counts(scores[:, 0], scores[:, 1:])
        greater.append(g.masked_fill(torch.isnan(scores[:, 0]), MISS))
        ties.append(t)
    empty = torch.zeros(0, dtype=torch.int64, device=env.device)
    g, t = (torch.cat(x) if x else empty for x in (greater, ties))
    return _gathered(g, first, n_users, env), _gathered(t, first, n_users, env)


@torch.inference_mode()
def full_ranks(
    scorer,
    data: EtlData,
    env: DistEnv,
    batch_size: int,
    known: tuple[torch.Tensor, torch.Tensor],
    ks: tuple[int, ...] = SUITE_KS,
) -> dict[str, torch.Tensor]:
    """Each test user's held-out item among every item it has no ``known`` interaction with.

    ``scorer(users [u], items [C]) -> [u, C]``. Returns int64 ``[U]`` ``greater``, ``ties`` and
    ``candidates`` (other unknown items, plus the held-out one), and for every K of ``ks`` the
    item coverage (``coverage@K``: the share of the catalogue in some user's top K) and the average
    training popularity of the recommended items (``avg_popularity@K``) as 0-d float64 tensors.
    """
    lo, hi = data.item_range
    n_users, catalogue = data.test_users.numel(), hi - lo
    items = torch.arange(lo, hi, device=env.device)
    indptr, cols = seen_csr(*known, data.num_users, lo)
    popularity = torch.bincount(data.train_items.long() - lo, minlength=catalogue).double()
    first, last = shard_bounds(n_users, env.world_size, env.rank)
    step = _chunk(batch_size, catalogue, env)
    kmax = min(max(ks), catalogue)
    parts: dict[str, list[torch.Tensor]] = {"greater": [], "ties": [], "candidates": []}
    sums = {f"hit@{k}": torch.zeros(catalogue, dtype=torch.float64, device=env.device) for k in ks}
    sums |= {f"pop_sum@{k}": torch.zeros((), dtype=torch.float64, device=env.device) for k in ks}
    for s in range(first, last, step):
        e = min(s + step, last)
        users = data.test_users[s:e].long()
        scores = scorer(users, items).float()  # [u, C]
        # the top lists first, on a copy: full_rank_counts reads the held-out score unmasked
        top = _top_items(scores.clone(), users, indptr, cols, kmax)  # [u, kmax]
        for key, value in coverage_popularity(top, popularity, ks).items():
            sums[key] += value.double()
        pos_cols = data.test_items[s:e].long() - lo
        g, t, pos, c = full_rank_counts(scores, pos_cols, users, indptr, cols)
        parts["greater"].append(g.masked_fill(~(pos > float("-inf")), MISS))
        parts["ties"].append(t)
        parts["candidates"].append(c)
    empty = torch.zeros(0, dtype=torch.int64, device=env.device)
    out = {
        k: _gathered(torch.cat(v) if v else empty, first, n_users, env) for k, v in parts.items()
    }
    for value in sums.values():
        all_reduce_sum(value, env)
    for k in ks:
        out[f"coverage@{k}"] = (sums[f"hit@{k}"] > 0).double().mean()
        out[f"avg_popularity@{k}"] = sums[f"pop_sum@{k}"] / max(1, n_users * min(k, kmax))
    return out


def _top_items(scores, users, indptr, cols, k: int) -> torch.Tensor:
    """Catalogue columns ``[u, k]`` of each user's best items among those it has not interacted
    with (``scores [u, C]`` is masked in place): what it would be recommended."""
    mask_seen(scores, users, indptr, cols)
    return scores.topk(k, dim=1).indices


def figures(greater: torch.Tensor, ties: torch.Tensor, ks: tuple[int, ...] = SUITE_KS) -> dict:
    """The means over users of ``metric_suite`` (a dict of floats; empty for no users)."""
    if greater.numel() == 0:
        return {}
    return {name: float(v.mean()) for name, v in metric_suite(greater, ties, ks).items()}


def write_per_user(path: str | Path, users: torch.Tensor, columns: dict[str, torch.Tensor]) -> None:
    """Write ``user_id`` (model ids) and the rank-count ``columns`` (``[U]`` each) as one parquet file,
    atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = {names.USER: users.cpu().numpy().astype(np.int64)}
    table |= {name: v.cpu().numpy().astype(np.int64) for name, v in columns.items()}
    buf = io.BytesIO()
    pq.write_table(pa.table(table), buf)
    write_bytes(path, buf.getvalue())
