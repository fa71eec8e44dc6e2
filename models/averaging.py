"""An exponential moving average of the trained weights (``--ema-epochs``), the model evaluated.

After every optimizer step ``avg <- decay * avg + (1 - decay) * weights``, over every parameter;
the average starts as the weights after the first step (of a run, a warm start or a pretrained
NeuMF alike). The trainer evaluates, selects and saves the average as the run's model (``model``
in ``best.pt`` / ``last.pt``: what export, evaluate and ``--init-from`` read); ``last.pt`` keeps
the trained weights under ``trained_model`` for ``--resume``. At ``decay`` d the average spans
about ``1 / (1 - d)`` steps; ``--ema-epochs E`` sets ``d = 1 - 1 / (E x steps per epoch)``
(``TrainConfig.ema_decay``), so that the span is E epochs on data of any size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


class WeightAverage:
    """The moving average of ``model``'s parameters, by name (docstring of the module)."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.avg: dict[str, torch.Tensor] | None = None  # name -> averaged parameter

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold the weights after an optimizer step into the average (the first: a copy)."""
        params = dict(model.named_parameters())
        if self.avg is None:
            self.avg = {n: p.detach().clone() for n, p in params.items()}
            return
        for n, a in self.avg.items():
            a.lerp_(params[n].detach(), 1.0 - self.decay)

    def state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """``model``'s state dict with the averaged parameters (the weights before any step)."""
        avg = self.avg or {}
        return {k: avg.get(k, v).detach() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def load(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """The average from a checkpoint's ``model`` (a ``state_dict`` of this class)."""
        self.avg = {n: state[n].detach().clone() for n, _ in model.named_parameters()}

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """``model`` holds the averaged weights inside the block, its own after it."""
        if self.avg is None:
            yield
            return
        params = dict(model.named_parameters())
        with torch.no_grad():
            saved = {n: params[n].detach().clone() for n in self.avg}
            for n, a in self.avg.items():
                params[n].copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for n, w in saved.items():
                    params[n].copy_(w)
