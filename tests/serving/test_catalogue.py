"""CatalogueNeuMF: users x every item (or given items) equal ServingNeuMF on the same pairs, eager
and scripted; bf16 stays close to fp32."""

from __future__ import annotations

import pytest
import torch

from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving.catalogue import CatalogueNeuMF, to_precision
from ncf.serving.served import ServingNeuMF


@pytest.mark.parametrize(
    ("layers", "lo", "hi"),
    [([32, 16, 8], 0, 40), ([16, 8], 1, 40), ([16], 1, 37)],
    ids=["three-layers", "oov-row-skipped", "no-hidden-layer"],
)
@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "torchscript"])
def test_scores_equal_the_pairwise_network(layers, lo, hi, scripted):
    torch.manual_seed(0)
    model = NeuMF(NeuMFConfig(num_users=12, num_items=40, factors=4, mlp_layers=layers)).eval()
    catalogue = CatalogueNeuMF(model, lo, hi).eval()
    if scripted:
        catalogue = torch.jit.script(catalogue)
    pairwise = ServingNeuMF(model).eval()
    items = torch.arange(lo, hi).unsqueeze(1)  # [C, 1]
    users = [0, 5, 11]
    with torch.no_grad():
        got, ids = catalogue(torch.tensor(users).unsqueeze(1))  # [3, C], [3, 1]
        want = torch.cat([pairwise(torch.full_like(items, u), items).T for u in users])
    assert got.shape == (3, hi - lo) and got.dtype == torch.float32
    assert ids.tolist() == [[0]] * 3
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "torchscript"])
def test_score_items_equals_the_catalogue_columns(scripted):
    torch.manual_seed(1)
    model = NeuMF(NeuMFConfig(num_users=6, num_items=30, factors=4, mlp_layers=[16, 8])).eval()
    catalogue = CatalogueNeuMF(model, 3, 30, export_id=123).eval()
    catalogue = torch.jit.script(catalogue) if scripted else catalogue
    users = torch.tensor([[1], [4]])
    picked = torch.tensor([[3, 29, 10, 10], [7, 4, 3, 28]])  # item model ids, repeats allowed
    with torch.no_grad():
        every, _ = catalogue(users)
        got, ids = catalogue.score_items(users, picked)
    torch.testing.assert_close(got, torch.gather(every, 1, picked - 3), rtol=0, atol=0)
    assert ids.tolist() == [[123], [123]]


def test_bf16_is_close_to_fp32_and_keeps_the_ranking_head():
    """bf16 hidden layers: probabilities within 1e-2 of fp32, the top item unchanged, on a
    DLE-shaped MLP (the export records the same comparison for the real model)."""
    torch.manual_seed(2)
    model = NeuMF(NeuMFConfig(num_users=8, num_items=500, factors=16, mlp_layers=[64, 32, 16]))
    with torch.no_grad():
        for emb in (model.mf_user_embed, model.mf_item_embed):
            emb.weight.normal_(0.0, 0.5)  # spread the scores apart, as training does
    catalogue = torch.jit.script(CatalogueNeuMF(model.eval(), 3, 500).eval())
    users = torch.arange(8).unsqueeze(1)
    with torch.no_grad():
        fp32, _ = catalogue(users)
        bf16, _ = to_precision(catalogue, "bf16")(users)
        back, _ = to_precision(catalogue, "fp32")(users)
    assert bf16.dtype == torch.float32 and 0 < float((bf16 - fp32).abs().max()) < 1e-2
    assert torch.equal(bf16.argmax(1), fp32.argmax(1))
    torch.testing.assert_close(back, fp32, rtol=0, atol=1e-2)  # weights were rounded once
    with pytest.raises(ValueError, match="precision='fp16'"):
        to_precision(catalogue, "fp16")


def test_the_catalogue_is_a_snapshot_of_the_weights():
    """Exported weights do not follow later training of the source model (buffers are copies)."""
    model = NeuMF(NeuMFConfig(num_users=3, num_items=5, factors=2, mlp_layers=[4, 2])).eval()
    catalogue = CatalogueNeuMF(model, 0, 5)
    before = catalogue(torch.tensor([[1]]))[0].clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    torch.testing.assert_close(catalogue(torch.tensor([[1]]))[0], before)
    assert not any(p.requires_grad for p in catalogue.parameters())


@pytest.mark.parametrize(("lo", "hi"), [(-1, 5), (0, 6), (3, 3)])
def test_item_range_outside_the_model_is_refused(lo, hi):
    model = NeuMF(NeuMFConfig(num_users=3, num_items=5, factors=2, mlp_layers=[4, 2]))
    with pytest.raises(ValueError, match=rf"item range \[{lo}, {hi}\)"):
        CatalogueNeuMF(model, lo, hi)
