"""NeuMF as it is served: the pair scorer that ``ncf export`` traces and ``bench/inference.py`` times.

Imports only torch (no onnx), so it also runs on hosts that have no ONNX packages.
"""

from __future__ import annotations

import torch
from torch import nn

from ncf.models.neumf import NeuMF


class ServingNeuMF(nn.Module):
    """NeuMF as served: ``user_id [B, 1]``, ``item_id [B, 1]`` int64 -> probability ``[B, 1]`` fp32.

    The forward() argument names are the Triton input names (the libtorch backend matches them).
    """

    def __init__(self, model: NeuMF):
        super().__init__()
        self.model = model

    def forward(self, user_id: torch.Tensor, item_id: torch.Tensor) -> torch.Tensor:
        logits = self.model(user_id.squeeze(1), item_id.squeeze(1))  # [B]
        return torch.sigmoid(logits).unsqueeze(1).float()  # [B, 1]
