"""NeuMF as it is served, and loading it from a training checkpoint.

Shared by ``ncf export`` and ``bench/inference.py``; imports only torch (no onnx), so it also runs
on hosts that have no ONNX packages.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from models.neumf import NeuMF, NeuMFConfig


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


def load_checkpoint(path: str | os.PathLike) -> tuple[NeuMF, dict]:
    """Build NeuMF from a training checkpoint (docs/ARCHITECTURE.md), in eval mode.

    Raises
    ------
    FileNotFoundError, ValueError
        No file, or not a checkpoint of the documented format.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found: pass --checkpoint RUN_DIR/best.pt")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle/zip errors have many types; all mean "not a checkpoint"
        raise ValueError(
            f"{path} is not a torch checkpoint readable with weights_only=True: {exc}"
        ) from exc
    if not isinstance(ckpt, dict) or "model" not in ckpt or "config" not in ckpt:
        keys = list(ckpt) if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(
            f"{path}: expected a dict with 'model' and 'config' (got {keys}); use best.pt of `ncf train`"
        )
    state = dict(ckpt["model"])
    for prefix in ("module.", "_orig_mod."):  # DDP- or torch.compile-wrapped state dicts
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    model = NeuMF(NeuMFConfig(**ckpt["config"]))
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(
            f"{path}: state_dict does not match its config {ckpt['config']}: {exc}"
        ) from exc
    return model.eval(), ckpt
