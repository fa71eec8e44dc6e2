"""The training losses (models/loss.py) and the grouped epoch layout a softmax loss trains on."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ncf.models.data import load_etl
from ncf.models.distributed import dist_env
from ncf.models.epoch import epoch_generator, gather, plan_epoch
from ncf.models.loss import group_size, summed_loss
from ncf.models.presets import TrainConfig
from ncf.models.trainer import RunOptions, Trainer


@pytest.mark.parametrize(("loss", "negatives", "want"), [("bce", 4, 1), ("softmax", 4, 5)])
def test_group_size(loss: str, negatives: int, want: int):
    assert group_size(loss, negatives) == want


def test_bce_is_the_summed_binary_cross_entropy():
    logits = torch.tensor([2.0, -1.0, 0.0])
    labels = torch.tensor([1.0, 0.0, 1.0])
    # -log(sigmoid(2)) - log(1 - sigmoid(-1)) - log(sigmoid(0))
    want = math.log1p(math.exp(-2)) + math.log1p(math.exp(-1)) + math.log(2)
    torch.testing.assert_close(summed_loss(logits, labels, 1), torch.tensor(want))


def test_softmax_is_each_positive_against_its_own_negatives():
    # two groups of three, the positive first: [2, 0, 1] and [1, 1, 1]
    logits = torch.tensor([2.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.bfloat16)
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    want = math.log(math.exp(2) + 1 + math.exp(1)) - 2 + math.log(3)
    got = summed_loss(logits, labels, 3)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(want))


def test_grouped_plan_keeps_each_positive_with_its_own_negatives(etl_dir: Path):
    data = load_etl(etl_dir)
    p, neg = data.train_users.numel(), 3
    plan = plan_epoch(data, neg, "approximate", None, epoch_generator(1, 0, torch.device("cpu")),
                      grouped=True)  # fmt: skip
    rows = plan.perm.long().view(p, 1 + neg)
    assert torch.equal(rows[:, 0].sort().values, torch.arange(p))  # every positive once, first
    users, items, labels = gather(plan, data, plan.perm)
    users, labels = users.view(p, 1 + neg), labels.view(p, 1 + neg)
    assert torch.equal(users, users[:, :1].expand(-1, 1 + neg))  # one user per group
    assert torch.equal(labels, torch.tensor([[1.0] + [0.0] * neg]).expand(p, -1))
    assert torch.equal(items.view(p, 1 + neg)[:, 0], data.train_items[rows[:, 0]])


def _step(etl_dir: Path, micro_batch: int) -> dict[str, torch.Tensor]:
    """Parameters after one softmax step of 50 groups of 5, cut into micro-batches of at most
    ``micro_batch`` samples (whole groups each)."""
    cfg = TrainConfig(loss="softmax", negatives=4, batch_size=252, micro_batch=micro_batch,
                      dropout=0.0, seed=3)  # fmt: skip
    tr = Trainer(load_etl(etl_dir), cfg, dist_env("cpu"), RunOptions(out=etl_dir, etl_dir=etl_dir))
    # SGD with lr 1: the step moves each parameter by minus its gradient (Adam's first step is
    # about lr x sign(gradient), which rounding flips where a gradient is near 0)
    tr.opt = torch.optim.SGD(tr.model.parameters(), lr=1.0)
    gen = epoch_generator(3, 0, torch.device("cpu"))
    plan = plan_epoch(tr.data, 4, "exact", tr.positives, gen, grouped=True)
    loss = tr.step(plan, 0, 250, gen)  # the epoch's first batch: 252 rounded down to groups
    assert loss > 0
    return {n: p.detach().clone() for n, p in tr.model.named_parameters()}


def test_softmax_step_is_the_same_whatever_the_micro_batch_cut(etl_dir: Path):
    torch.set_num_threads(1)
    whole = _step(etl_dir, micro_batch=250)
    cut = _step(etl_dir, micro_batch=90)  # 3 micro-batches: 16, 17 and 17 groups
    for name, want in whole.items():
        torch.testing.assert_close(cut[name], want, msg=name)


def test_softmax_needs_negatives():
    with pytest.raises(ValueError, match="--loss 'softmax' with --negatives 0"):
        TrainConfig(loss="softmax", negatives=0).check()


def test_softmax_step_follows_the_mean_cross_entropy_of_the_batch_s_groups(etl_dir: Path):
    """SGD with lr 1 moves each parameter by minus the gradient of the mean over the batch's 50
    groups of ``logsumexp(z) - z[0]``, computed here by plain autograd."""
    torch.set_num_threads(1)
    got = _step(etl_dir, micro_batch=90)
    cfg = TrainConfig(loss="softmax", negatives=4, dropout=0.0, seed=3)
    ref = Trainer(load_etl(etl_dir), cfg, dist_env("cpu"), RunOptions(out=etl_dir, etl_dir=etl_dir))
    ref.model.step_grads = None  # nn.Embedding's own backward
    gen = epoch_generator(3, 0, torch.device("cpu"))
    plan = plan_epoch(ref.data, 4, "exact", ref.positives, gen, grouped=True)
    users, items, _ = gather(plan, ref.data, plan.perm[:250])
    z = ref.model(users, items).view(50, 5)
    (torch.logsumexp(z, dim=1) - z[:, 0]).mean().backward()
    for name, p in ref.model.named_parameters():
        torch.testing.assert_close(got[name], (p - p.grad).detach(), msg=name)
