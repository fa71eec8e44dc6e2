"""The model kinds ``ncf train --model`` builds: NeuMF (the project's model) and MF (a baseline).

One place maps a kind to its config and module, for the trainer and the checkpoint loader. The
trainer tells the kinds apart only through ``TrainedModel``, the interface each kind implements.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from ncf.models.embedding_grad import StepGradients
from ncf.models.mf import MF, MFConfig
from ncf.models.neumf import NeuMF, NeuMFConfig


class TrainedModel(Protocol):
    """What the trainer asks of a model kind besides ``forward(user [B], item [B]) -> logits [B]``."""

    # Where training forwards send their embedding tables' gradients (None: nn.Embedding's own
    # backward): one dense gradient per table and optimizer step (models/embedding_grad.py).
    step_grads: StepGradients | None

    def dropout_widths(self) -> list[int]:
        """Widths of the layers whose dropout keep bits the trainer draws per global batch ([]: none)."""
        ...

    def set_dropout_bits(self, bits: list[torch.Tensor] | None) -> None:
        """Keep bits ``[rows, ceil(width / 8)]`` uint8 per ``dropout_widths`` layer for the next
        training forward (rows = its batch); None: the model draws its own."""
        ...

    def penalty(self) -> torch.Tensor | float:
        """Regularization of the last training forward, summed over its examples (added to the
        summed BCE, so both get the same per-example weight); 0.0 for none."""
        ...


MODELS: dict[str, tuple[type, type[nn.Module]]] = {
    "neumf": (NeuMFConfig, NeuMF),
    "mf": (MFConfig, MF),
}
LABELS = {"neumf": "NeuMF", "mf": "MF"}  # how reports name each kind
DEFAULT_KIND = "neumf"  # checkpoints written before MF existed record no kind


def config_class(kind: str) -> type:
    """The config dataclass of ``kind``; ValueError naming the valid kinds."""
    if kind not in MODELS:
        raise ValueError(f"--model {kind!r}: use one of {sorted(MODELS)}")
    return MODELS[kind][0]


def build_model(kind: str, config: object | dict) -> nn.Module:
    """A new model of ``kind`` from its config (the dataclass or its ``to_dict()``)."""
    cls = config_class(kind)
    cfg = cls(**config) if isinstance(config, dict) else config
    if not isinstance(cfg, cls):
        raise ValueError(f"--model {kind}: got a {type(cfg).__name__}, expected {cls.__name__}")
    return MODELS[kind][1](cfg)
