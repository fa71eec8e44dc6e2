"""One training epoch's samples, laid out as DLE does, drawn on the training device.

The epoch is ``[positives; negatives]`` with ``negatives`` = ``negatives_per_positive`` fresh
draws per positive (negative ``j`` belongs to positive ``j % P``), shuffled by one permutation.
Global batch ``b`` is ``perm[b * B : (b + 1) * B]``; rank ``r`` of ``W`` trains on the ``r``-th of
``W`` contiguous slices of it, so ranks see disjoint shards and the union is what one process sees.

Everything random comes from one generator seeded by ``(seed, epoch)`` and consumed identically on
every rank: results depend neither on the number of ranks nor on where a run was resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ncf.models.data import EtlData
from ncf.models.sampling import PositiveSet, sample_negatives


def epoch_generator(seed: int, epoch: int, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from ``(seed, epoch)`` (well mixed by numpy's SeedSequence)."""
    state = int(np.random.SeedSequence([int(seed), int(epoch)]).generate_state(1, np.uint64)[0])
    gen = torch.Generator(device=device)
    gen.manual_seed(state & ((1 << 63) - 1))
    return gen


@dataclass
class EpochPlan:
    """The shuffled order of an epoch and its negatives."""

    perm: torch.Tensor  # [P * (1 + neg)] sample ids in training order
    negatives: torch.Tensor  # [P * neg] int32 item of each negative sample
    num_positives: int

    @property
    def num_samples(self) -> int:
        return self.perm.numel()


def plan_epoch(
    data: EtlData,
    negatives_per_positive: int,
    mode: str,
    positives: PositiveSet | None,
    gen: torch.Generator,
    grouped: bool = False,
) -> EpochPlan:
    """Draw an epoch's negatives (chunk by chunk, per repeat of the positives) and its shuffle.

    ``grouped``: the shuffle moves whole groups, each positive followed by its own negatives
    (``[i, p + i, 2p + i, ...]``, ``1 + negatives_per_positive`` samples), as a listwise loss
    needs; otherwise every sample is shuffled on its own (DLE).
    """
    users = data.train_users
    p = users.numel()
    negs = torch.empty(p * negatives_per_positive, dtype=torch.int32, device=users.device)
    for r in range(negatives_per_positive):
        negs[r * p : (r + 1) * p] = sample_negatives(users, mode, positives, data.item_range, gen)
    n = p * (1 + negatives_per_positive)
    dtype = torch.int32 if n < 2**31 else torch.int64  # half the memory of int64 at ML-20m size
    if grouped:  # [P, 1 + neg]: row i = positive i's sample ids, the positive first
        order = torch.randperm(p, generator=gen, device=users.device, dtype=dtype)
        offsets = torch.arange(1 + negatives_per_positive, device=users.device, dtype=dtype) * p
        perm = (order.unsqueeze(1) + offsets).reshape(-1)
    else:
        perm = torch.randperm(n, generator=gen, device=users.device, dtype=dtype)
    return EpochPlan(perm=perm, negatives=negs, num_positives=p)


def gather(
    plan: EpochPlan, data: EtlData, idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Users, items (int32) and float labels ``[n]`` of the sample ids ``idx [n]``."""
    p = plan.num_positives
    idx = idx.long()
    is_neg = idx >= p
    j = (idx - p).clamp_(min=0)  # negative number (garbage where positive, masked below)
    src = torch.where(is_neg, j % p, idx)  # the positive whose user the sample has
    users = data.train_users[src]
    items = data.train_items[src]
    if plan.negatives.numel():
        items = torch.where(is_neg, plan.negatives[j.clamp_(max=plan.negatives.numel() - 1)], items)
    labels = (~is_neg).float()
    return users, items, labels


def shard_bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """``[start, end)`` of the ``index``-th of ``parts`` contiguous, near-equal slices of ``n`` items."""
    return n * index // parts, n * (index + 1) // parts
