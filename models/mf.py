"""Dot-product matrix factorization as Rendle et al. (2020) set it up (docs/BASELINES.md).

``logit(u, i) = <p_u, q_i> + b_u + b_i + b``, trained by the NeuMF trainer (same negatives, split and
BCE loss) plus a per-example L2 term: ``l2 * (|p_u|^2 + |q_i|^2 + b_u^2 + b_i^2 + b^2)`` for every
training example (positive or negative), as in their SGD objective.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ncf.models.embedding_grad import StepGradients, lookup


@dataclass
class MFConfig:
    num_users: int  # embedding rows (Categorify cardinality, reserved low ids included)
    num_items: int
    factors: int = 64  # embedding width
    l2: float = 0.0  # per-example L2 coefficient (their "regularization")
    init_std: float = 0.1  # embeddings ~ N(0, init_std); biases start at 0

    def __post_init__(self) -> None:
        if min(self.num_users, self.num_items, self.factors) < 1:
            raise ValueError(f"MF {self}: num_users, num_items and factors must be >= 1")
        if self.l2 < 0 or self.init_std <= 0:
            raise ValueError(
                f"MF l2={self.l2}, init_std={self.init_std}: need l2 >= 0, init_std > 0"
            )

    def to_dict(self) -> dict:  # plain values that torch.load(weights_only=True) reads back
        return asdict(self)


class MF(nn.Module):
    """User/item embeddings and biases, a global bias; ``forward`` gives logits ``[B]``."""

    def __init__(self, cfg: MFConfig):
        super().__init__()
        self.cfg = cfg
        self.user_embed = nn.Embedding(cfg.num_users, cfg.factors)
        self.item_embed = nn.Embedding(cfg.num_items, cfg.factors)
        self.user_bias = nn.Embedding(cfg.num_users, 1)
        self.item_bias = nn.Embedding(cfg.num_items, 1)
        self.bias = nn.Parameter(torch.zeros(()))
        for table in (self.user_embed, self.item_embed):
            nn.init.normal_(table.weight, 0.0, cfg.init_std)
        for table in (self.user_bias, self.item_bias):
            nn.init.zeros_(table.weight)
        # L2 term (summed over the examples) of the last training forward; the trainer adds it to the
        # summed BCE, so both get the same per-example weight.
        self.last_penalty: torch.Tensor | float = 0.0
        # Set by the trainer: one dense gradient per table and step (models/embedding_grad.py).
        self.step_grads: StepGradients | None = None

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """Logits ``[B]`` for int ids ``user [B]`` and ``item [B]``."""
        if self.training:
            p, q, bu, bi = self._lookups_train(user, item)
        else:
            p, q = self.user_embed(user), self.item_embed(item)  # [B, factors]
            bu, bi = self.user_bias(user), self.item_bias(item)  # [B, 1]
        bu, bi = bu.squeeze(1), bi.squeeze(1)  # [B]
        if self.training and self.cfg.l2 > 0 and torch.is_grad_enabled():
            squares = p.square().sum() + q.square().sum() + bu.square().sum() + bi.square().sum()
            self.last_penalty = self.cfg.l2 * (squares + user.numel() * self.bias.square())
        return (p * q).sum(1) + bu + bi + self.bias

    # Unannotated: TorchScript cannot resolve the string type hints of an unused method.
    @torch.jit.unused
    def _lookups_train(self, user, item):
        """The four embedding rows of a training batch, through ``step_grads`` when set."""
        g = self.step_grads
        return (
            lookup(self.user_embed, user, g),
            lookup(self.item_embed, item, g),
            lookup(self.user_bias, user, g),
            lookup(self.item_bias, item, g),
        )

    def dropout_widths(self) -> list[int]:
        """No dropout: no keep bits to draw (``ncf.models.kinds.TrainedModel``)."""
        return []

    def set_dropout_bits(self, bits: list[torch.Tensor] | None) -> None:
        """No dropout layer takes them (``bits`` is empty or None)."""

    def penalty(self) -> torch.Tensor | float:
        """The L2 term of the last training forward (0.0 while ``l2`` is 0)."""
        return self.last_penalty

    def score_matrix(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Logits ``[U, C]`` of every pair of ``users [U]`` and ``items [C]`` (one matmul)."""
        dot = self.user_embed(users) @ self.item_embed(items).T
        return dot + self.user_bias(users) + self.item_bias(items).T + self.bias
