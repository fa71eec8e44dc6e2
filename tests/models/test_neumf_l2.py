"""NeuMF's optional L2 on the batch's embedding rows (``--l2``), hand-computed."""

from __future__ import annotations

import pytest
import torch

from ncf.models.neumf import NeuMF, NeuMFConfig


def _model(l2: float) -> NeuMF:
    torch.manual_seed(0)
    return NeuMF(NeuMFConfig(num_users=5, num_items=7, factors=4, mlp_layers=[8, 4], l2=l2))


def test_penalty_is_l2_times_the_squared_rows_of_the_batch():
    m = _model(0.1).train()
    u, i = torch.tensor([0, 1, 1]), torch.tensor([2, 3, 6])  # user 1 twice: counted twice
    m(u, i)
    tables = (m.mf_user_embed(u), m.mf_item_embed(i), m.mlp_user_embed(u), m.mlp_item_embed(i))
    torch.testing.assert_close(m.penalty(), 0.1 * sum(t.square().sum() for t in tables))


@pytest.mark.parametrize(("l2", "training"), [(0.0, True), (0.1, False)])
def test_no_penalty_without_l2_or_outside_training(l2: float, training: bool):
    m = _model(l2).train(training)
    m(torch.tensor([0]), torch.tensor([1]))
    assert m.penalty() == 0.0


def test_negative_l2_is_refused():
    with pytest.raises(ValueError, match="l2=-1"):
        NeuMFConfig(num_users=2, num_items=2, l2=-1)


def test_the_model_still_scripts():
    scripted = torch.jit.script(_model(0.1).eval())
    assert scripted(torch.tensor([0, 1]), torch.tensor([2, 3])).shape == (2,)
