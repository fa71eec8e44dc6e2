"""ReLU + dropout fused into one autograd op, with masks drawn as packed random bits.

Same distribution as ``nn.Dropout(p)(relu(x))``: each unit is kept independently with probability
``1 - p`` and scaled by ``1 / (1 - p)``. Why not ``nn.Dropout``: on a CPU its ``bernoulli_`` mask
draw is ~40% of a NeuMF training step, and it stores a float mask beside ReLU's saved output.

For ``p == 0.5`` a keep mask is one random *bit* per unit: the trainer draws the bits of a whole
global batch ``[rows, ceil(width / 8)]`` uint8 once per step (cheap: 1/32 of a float mask) from the
epoch's generator, and every rank and micro-batch slices its rows, so training results do not
depend on the number of processes or on gradient accumulation. Other ``p`` draw ``rand < 1 - p``
per call (same distribution, no such invariance).

The mask is applied as floats: ``relu(x) * mask`` with ``mask`` in ``{0, 1/(1-p)}``, ReLU's
derivative folded into the saved mask (4 bytes per unit, against ReLU's output plus a float
dropout mask in the unfused form).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_LUTS: dict[tuple, torch.Tensor] = {}


def bits_supported(p: float) -> bool:
    """True where keep masks can be packed random bits (exactly Bernoulli(0.5))."""
    return p == 0.5


def draw_keep_bits(
    rows: int,
    width: int,
    generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Uniform random bytes ``[rows, ceil(width / 8)]`` uint8: bit j of byte c keeps unit ``8c + j``.

    Drawn as full-range int64 words viewed as bytes: one generator call per 8 bytes.
    """
    per_row = (width + 7) // 8
    words = torch.empty((rows * per_row + 7) // 8, dtype=torch.int64, device=device)
    words.random_(-(2**63), None, generator=generator)  # every 64-bit pattern equally likely
    return words.view(torch.uint8)[: rows * per_row].view(rows, per_row)


def _lut(scale: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[256, 8]``: row b holds ``scale`` where bit j of b is set, else 0."""
    key = (scale, dtype, device)
    if key not in _LUTS:
        bits = (torch.arange(256, device=device).unsqueeze(1) >> torch.arange(8, device=device)) & 1
        _LUTS[key] = (bits * scale).to(dtype)
    return _LUTS[key]


def scaled_keep_mask(
    bits: torch.Tensor, width: int, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """Mask ``[rows, width]`` of ``scale`` (kept) or 0 (dropped) from packed bits.

    One table lookup per byte yields 8 mask values at once: cheaper than unpacking bits with
    shifts and casting a bool mask (bool arithmetic is slow on CPUs).
    """
    mask = F.embedding(bits.int(), _lut(scale, dtype, bits.device))  # [rows, bytes, 8]
    return mask.view(bits.shape[0], bits.shape[1] * 8)[:, :width]  # explicit: rows may be 0


class _ReluDropout(torch.autograd.Function):
    """``relu(x) * mask`` with mask in {0, 1/(1-p)}; saves one combined mask for backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # mask where x > 0, else 0: ReLU's derivative folded into the dropout mask, one pass.
        combined = torch.ops.aten.threshold_backward(mask, x, 0.0)
        ctx.save_for_backward(combined)
        return x * combined

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (combined,) = ctx.saved_tensors
        return grad * combined, None


def relu_dropout(x: torch.Tensor, p: float, bits: torch.Tensor | None = None) -> torch.Tensor:
    """Training-mode ``dropout(relu(x), p)`` for ``x [rows, width]``.

    Parameters
    ----------
    x
        Pre-activation ``[rows, width]``.
    p
        Drop probability in [0, 1).
    bits
        Packed keep bits ``[rows, ceil(width / 8)]`` (only for ``p == 0.5``); drawn here from the
        global generator when None.
    """
    if p == 0.0:
        return torch.relu(x)
    rows, width = x.shape
    scale = 1.0 / (1.0 - p)
    if bits_supported(p):
        if bits is None:
            bits = draw_keep_bits(rows, width, device=x.device)
        mask = scaled_keep_mask(bits, width, scale, x.dtype)
    else:
        mask = (torch.rand(rows, width, device=x.device) >= p).to(x.dtype) * scale
    return _ReluDropout.apply(x, mask)


def dropout(x: torch.Tensor, p: float, bits: torch.Tensor | None = None) -> torch.Tensor:
    """Training-mode ``dropout(x, p)`` for ``x [rows, width]``, masks drawn as ``relu_dropout``
    draws them (packed ``bits`` for ``p == 0.5``)."""
    if p == 0.0:
        return x
    rows, width = x.shape
    scale = 1.0 / (1.0 - p)
    if bits_supported(p):
        if bits is None:
            bits = draw_keep_bits(rows, width, device=x.device)
        return x * scaled_keep_mask(bits, width, scale, x.dtype)
    return x * ((torch.rand(rows, width, device=x.device) >= p).to(x.dtype) * scale)
