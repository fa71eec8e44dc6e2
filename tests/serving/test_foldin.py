"""serving/foldin.py: the cold start's fit of a new user's vectors to a history, by hand-written
gradients, against autograd and against what the fit is for."""

from __future__ import annotations

import io

import pytest
import torch

from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving.catalogue import CatalogueNeuMF
from ncf.serving.foldin import FoldIn, check_foldin, to_foldin

META = {"item_id_range": [3, 203], "user_id_range": [3, 53]}
ARGS = (20, 0.05, 0.0, 4)  # steps, lr, l2, negatives


def _model(mlp_layers: list[int]) -> NeuMF:
    torch.manual_seed(0)
    cfg = NeuMFConfig(num_users=53, num_items=203, factors=8, mlp_layers=mlp_layers)
    model = NeuMF(cfg).eval()
    with torch.no_grad():  # spread the embeddings so that users differ visibly
        for emb in (model.mf_user_embed, model.mf_item_embed, model.mlp_user_embed,
                    model.mlp_item_embed):  # fmt: skip
            emb.weight.normal_(0.0, 0.5)
    return model


@pytest.mark.parametrize("mlp_layers", [[16], [16, 8], [32, 16, 8]])
def test_the_gradient_is_autograd_s(mlp_layers):
    fold = FoldIn(_model(mlp_layers), *META.values())
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(0, 200, (12,), generator=gen)
    first, mf = fold.item_first[rows], fold.item_mf[rows]
    label = (torch.rand(12, generator=gen) > 0.5).float()
    user_mlp = torch.randn(fold.start_mlp.shape, generator=gen, requires_grad=True)
    user_mf = torch.randn(fold.start_mf.shape, generator=gen, requires_grad=True)
    logits = fold._logits(user_mlp, user_mf, first, mf)
    torch.nn.functional.binary_cross_entropy_with_logits(logits, label).backward()
    got = fold.gradient(user_mlp.detach(), user_mf.detach(), first, mf, label)
    torch.testing.assert_close(got, torch.cat((user_mlp.grad, user_mf.grad)))


def test_no_step_scores_like_the_average_trained_user():
    model = _model([16, 8])
    fold = FoldIn(model, *META.values())
    catalogue = CatalogueNeuMF(model, *META["item_id_range"])
    users = slice(*META["user_id_range"])
    catalogue.user_mlp = model.mlp_user_embed.weight[users].mean(0, keepdim=True).detach()
    catalogue.user_mf = model.mf_user_embed.weight[users].mean(0, keepdim=True).detach()
    want = catalogue(torch.zeros(1, 1, dtype=torch.int64))[0][0]
    torch.testing.assert_close(fold(torch.tensor([10, 20]), 0, 0.05, 0.0, 4), want)


def test_the_fit_sets_the_history_apart_and_repeats_exactly():
    fold = FoldIn(_model([16, 8]), *META.values())
    history = torch.tensor([40, 7, 150, 99, 12])  # model ids
    rows = history - META["item_id_range"][0]
    others = torch.ones(200, dtype=torch.bool)
    others[rows] = False

    def gap(steps: int) -> float:  # mean logit of the history over that of the other items
        logit = torch.logit(fold(history, steps, *ARGS[1:]))
        return float(logit[rows].mean() - logit[others].mean())

    assert gap(20) > 1.5 * gap(0) > 0  # the average user already likes these a little
    torch.testing.assert_close(fold(history.flip(0), *ARGS), fold(history, *ARGS), rtol=0, atol=0)
    assert not torch.equal(fold(history[:4], *ARGS), fold(history, *ARGS))


def test_the_exported_module_is_the_eager_one():
    model = _model([16, 8])
    data = to_foldin(model, META)
    assert check_foldin(model, data, META, seed=3) == 0.0
    scripted = torch.jit.load(io.BytesIO(data))
    history = torch.tensor([5, 6, 7])
    eager = FoldIn(model, *META.values())
    torch.testing.assert_close(scripted(history, *ARGS), eager(history, *ARGS), rtol=0, atol=0)
