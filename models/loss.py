"""The training losses (``TrainConfig.loss``), summed over a micro-batch's samples."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def group_size(loss: str, negatives: int) -> int:
    """Samples that one loss term spans: 1 for BCE, a positive and its negatives for softmax."""
    return 1 + negatives if loss == "softmax" else 1


def summed_loss(logits: torch.Tensor, labels: torch.Tensor, group: int) -> torch.Tensor:
    """The loss of ``logits [n]`` (any float dtype), summed, in fp32.

    ``group == 1``: BCE of each logit against ``labels [n]`` (1 positive, 0 negative).
    ``group > 1``: the samples are ``n / group`` groups, each a positive followed by its own
    negatives (``plan_epoch(grouped=True)``); each group adds the softmax cross-entropy of its
    positive, ``logsumexp(z) - z[0]`` over the group's logits ``z [group]``.
    """
    if group == 1:
        return F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="sum")
    z = logits.float().view(-1, group)  # [groups, 1 + negatives], the positive in column 0
    return (torch.logsumexp(z, dim=1) - z[:, 0]).sum()
