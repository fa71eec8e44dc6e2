"""Fused ReLU + dropout: DLE's distribution, correct gradients, and masks that slice with the batch."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from ncf.models.dropout import draw_keep_bits, relu_dropout, scaled_keep_mask
from ncf.models.neumf import NeuMF, NeuMFConfig


def test_mask_reads_bit_j_of_byte_c_as_unit_8c_plus_j():
    bits = torch.tensor([[0b00000101, 0b10000000]], dtype=torch.uint8)
    mask = scaled_keep_mask(bits, 16, 2.0, torch.float32)
    expected = torch.zeros(1, 16)
    expected[0, [0, 2, 15]] = 2.0
    assert_close(mask, expected)


def test_forward_and_backward_equal_relu_times_mask():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 24, generator=g, requires_grad=True)
    bits = draw_keep_bits(64, 24, g)
    out = relu_dropout(x, 0.5, bits)
    upstream = torch.randn(64, 24, generator=g)
    out.backward(upstream)
    mask = scaled_keep_mask(bits, 24, 2.0, torch.float32)
    assert_close(out, torch.relu(x.detach()) * mask)
    assert_close(x.grad, upstream * mask * (x.detach() > 0))


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_keep_rate_and_scale(p):
    torch.manual_seed(0)
    out = relu_dropout(torch.ones(2000, 64), p)
    kept = out > 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # 128k units: ~7 sigma
    assert_close(out[kept], torch.full((int(kept.sum()),), 1 / (1 - p)))


def test_drawn_bits_are_fair_per_position():
    bits = draw_keep_bits(20_000, 64, torch.Generator().manual_seed(1))
    rate = (scaled_keep_mask(bits, 64, 1.0, torch.float32)).mean(0)
    assert rate.min() > 0.48 and rate.max() < 0.52  # 20k draws per unit: ~5.6 sigma


def test_slicing_the_bits_gives_the_rows_of_the_whole_batch():
    """Why bits are drawn per global batch: any split of the rows gives the same outputs."""
    torch.manual_seed(0)
    model = NeuMF(NeuMFConfig(num_users=20, num_items=30, factors=8, mlp_layers=[16, 16, 8]))
    users, items = torch.randint(0, 20, (40,)), torch.randint(0, 30, (40,))
    bits = [draw_keep_bits(40, w, torch.Generator().manual_seed(i)) for i, w in enumerate((16, 8))]
    model.dropout_bits = bits
    whole = model(users, items)
    parts = []
    for lo, hi in ((0, 13), (13, 40)):
        model.dropout_bits = [b[lo:hi] for b in bits]
        parts.append(model(users[lo:hi], items[lo:hi]))
    assert_close(torch.cat(parts), whole)


def test_eval_mode_has_no_dropout():
    model = NeuMF(NeuMFConfig(num_users=5, num_items=5, factors=4, mlp_layers=[8, 4])).eval()
    u = torch.arange(5)
    assert_close(model(u, u), model(u, u))
    scripted = torch.jit.script(model)  # export path: training-only code is not compiled
    assert_close(scripted(u, u), model(u, u))


def test_empty_micro_batch():
    """A rank or micro-batch can get no rows of a small last batch; it must still run backward."""
    x = torch.randn(0, 16, requires_grad=True)
    out = relu_dropout(x, 0.5, draw_keep_bits(0, 16))
    out.sum().backward()
    assert out.shape == (0, 16) and x.grad.shape == (0, 16)


def test_dropout_at_input_drops_each_linear_input_with_the_drawn_bits():
    """RecBole's placement: relu(layer(dropout(x))) per layer; the MLP embeddings are dropped too."""
    cfg = NeuMFConfig(num_users=6, num_items=6, factors=4, mlp_layers=[8, 6, 4], dropout_at="input")
    model = NeuMF(cfg).train()
    assert model.dropout_widths() == [8, 6]  # the inputs of the two Linear layers
    g = torch.Generator().manual_seed(3)
    bits = [draw_keep_bits(6, w, g) for w in model.dropout_widths()]
    model.set_dropout_bits(bits)
    u = torch.arange(6)
    x = torch.cat((model.mlp_user_embed(u), model.mlp_item_embed(u)), dim=1)
    for layer, b, w in zip(model.mlp, bits, (8, 6), strict=True):
        x = torch.relu(layer(x * scaled_keep_mask(b, w, 2.0, torch.float32)))
    want = model.final(torch.cat((model.mf_user_embed(u) * model.mf_item_embed(u), x), 1))
    assert_close(model(u, u), want.squeeze(1))
    assert NeuMF(NeuMFConfig(6, 6, 4, [8, 4])).dropout_widths() == [4]  # after each ReLU (DLE)


def test_linear_init_torch_keeps_nn_linear_default():
    torch.manual_seed(0)
    ours = NeuMF(NeuMFConfig(6, 6, 4, [8, 4], linear_init="torch"))
    torch.manual_seed(0)
    reference = NeuMF(NeuMFConfig(6, 6, 4, [8, 4]))
    assert not torch.equal(ours.final.bias, torch.zeros(1))  # nn.Linear's uniform bias
    assert not torch.equal(ours.mlp[0].weight, reference.mlp[0].weight)
    with pytest.raises(ValueError, match="dropout_at='after'"):
        NeuMFConfig(6, 6, dropout_at="after")
