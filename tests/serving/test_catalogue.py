"""CatalogueNeuMF: one user x every item equals ServingNeuMF on the same pairs, eager and scripted."""

from __future__ import annotations

import pytest
import torch

from models.neumf import NeuMF, NeuMFConfig
from serving.catalogue import CatalogueNeuMF
from serving.served import ServingNeuMF


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
    for user in (0, 5, 11):
        with torch.no_grad():
            got = catalogue(torch.tensor([[user]]))  # [1, C]
            want = pairwise(torch.full_like(items, user), items).T  # [1, C]
        assert got.shape == (1, hi - lo) and got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_the_catalogue_is_a_snapshot_of_the_weights():
    """Exported weights do not follow later training of the source model (buffers are copies)."""
    model = NeuMF(NeuMFConfig(num_users=3, num_items=5, factors=2, mlp_layers=[4, 2])).eval()
    catalogue = CatalogueNeuMF(model, 0, 5)
    before = catalogue(torch.tensor([[1]])).clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    torch.testing.assert_close(catalogue(torch.tensor([[1]])), before)
    assert not any(p.requires_grad for p in catalogue.parameters())


@pytest.mark.parametrize(("lo", "hi"), [(-1, 5), (0, 6), (3, 3)])
def test_item_range_outside_the_model_is_refused(lo, hi):
    model = NeuMF(NeuMFConfig(num_users=3, num_items=5, factors=2, mlp_layers=[4, 2]))
    with pytest.raises(ValueError, match=rf"item range \[{lo}, {hi}\)"):
        CatalogueNeuMF(model, lo, hi)
