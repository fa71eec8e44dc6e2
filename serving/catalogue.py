"""NeuMF scoring the whole catalogue for a batch of users, the user-independent work done at export.

``recommend`` scores every item for each user of a request. NeuMF's first MLP layer acts on
``[user_embedding | item_embedding]``, so it splits into a user half and an item half; the item
half (plus the bias) is the same for every request and is computed once here, a ``[C, H1]`` table.
A request then adds each user's half and runs the remaining layers over the ``C`` items: for DLE's
256-256-128-64 MLP that skips ~60% of the multiply-adds of scoring ``C`` (user, item) pairs with
the full network. The probabilities equal ``ServingNeuMF`` on the same pairs up to float rounding
(``ncf export`` checks them against it).

Precision: ``to_precision(module, "bf16")`` stores the hidden layers after the first in bfloat16
(half the memory traffic, and CPUs with AVX512-BF16 or AMX run bf16 matrix products 2x or more
faster than fp32). The first layer's sum, the ReLU before the cast and the two final dot products
stay fp32, so the error is the bf16 rounding of the hidden activations and weights (``ncf export``
measures it: max abs difference of the probabilities and top-10 agreement with fp32).

Every output carries ``export_id`` (the manifest's id of the export that wrote this module), so a
caller can check that the scores come from the export it expects.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ncf.models.neumf import NeuMF

PRECISIONS = ("fp32", "bf16")


class CatalogueNeuMF(nn.Module):
    """``user_id [B, 1]`` int64 -> (probabilities ``[B, C]`` fp32 of items ``lo .. hi - 1``,
    ``export_id [B, 1]`` int64); ``score_items`` scores given item ids only.

    The forward() argument name is the Triton input name (the libtorch backend binds by name).
    """

    def __init__(self, model: NeuMF, item_lo: int, item_hi: int, export_id: int = 0):
        super().__init__()
        if not 0 <= item_lo < item_hi <= model.cfg.num_items:
            raise ValueError(
                f"item range [{item_lo}, {item_hi}) is not inside the model's "
                f"[0, {model.cfg.num_items}): pass the ETL metadata's item_id_range"
            )
        items, half, f = (
            slice(item_lo, item_hi),
            model.mlp_user_embed.embedding_dim,
            model.cfg.factors,
        )
        self.item_lo = item_lo
        # Without hidden layers the MLP tower is the embedding concat itself (no ReLU).
        self.has_hidden = len(model.mlp) > 0
        w = model.mlp[0].weight if self.has_hidden else torch.eye(2 * half)  # [H1, 2 * half]
        b = model.mlp[0].bias if self.has_hidden else torch.zeros(2 * half)
        with torch.no_grad():
            w_user, w_item = w[:, :half], w[:, half:]  # [H1, half] each
            item_first = model.mlp_item_embed.weight[items] @ w_item.T + b  # [C, H1]
            self.register_buffer("item_first", item_first.contiguous())
            self.register_buffer("user_first", w_user.T.contiguous())  # [half, H1]
            self.register_buffer("user_mlp", model.mlp_user_embed.weight.clone())  # [U, half]
            self.register_buffer("user_mf", model.mf_user_embed.weight.clone())  # [U, F]
            self.register_buffer("item_mf", model.mf_item_embed.weight[items].clone())  # [C, F]
            self.register_buffer("final_mf", model.final.weight[0, :f].clone())  # [F]
            self.register_buffer("final_mlp", model.final.weight[0, f:].clone())  # [H_last]
            self.register_buffer("final_bias", model.final.bias.clone())  # [1]
            self.register_buffer("export_id", torch.tensor([export_id], dtype=torch.int64))
        self.rest = nn.ModuleList(copy.deepcopy(layer) for layer in model.mlp[1:])
        self.rest.requires_grad_(False)

    def _score(
        self, u: torch.Tensor, item_first: torch.Tensor, item_mf: torch.Tensor
    ) -> torch.Tensor:
        """Probabilities ``[N]`` of user ``u`` (0-dim) for the items whose tables are given."""
        return torch.sigmoid(self._logits(self.user_mlp[u], self.user_mf[u], item_first, item_mf))

    def _logits(
        self,
        user_mlp: torch.Tensor,
        user_mf: torch.Tensor,
        item_first: torch.Tensor,
        item_mf: torch.Tensor,
    ) -> torch.Tensor:
        """Logits ``[N]`` of a user given by its vectors (MLP ``[half]``, GMF ``[F]``) for the
        items whose tables are given."""
        h = item_first + user_mlp @ self.user_first  # [N, H1], fp32
        if self.has_hidden:
            h = torch.relu(h)
        for layer in self.rest:  # each layer in its weights' dtype (bf16 after to_precision)
            h = torch.relu(layer(h.to(layer.weight.dtype)))  # [N, width]
        logits = item_mf @ (user_mf * self.final_mf) + h.float() @ self.final_mlp
        return logits + self.final_bias

    def forward(self, user_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        users = user_id.reshape(-1)  # [B]
        out = torch.empty(users.shape[0], self.item_first.shape[0])
        for b in range(users.shape[0]):  # one [C, H] pass per user keeps memory at one user's
            out[b] = self._score(users[b], self.item_first, self.item_mf)
        return out, self.export_id.expand(users.shape[0], 1)

    @torch.jit.export
    def score_items(
        self, user_id: torch.Tensor, item_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``user_id [B, 1]``, item model ids ``item_ids [B, N]`` (inside the catalogue) ->
        (probabilities ``[B, N]``, ``export_id [B, 1]``): the two-stage path's re-ranking."""
        users = user_id.reshape(-1)
        rows = item_ids - self.item_lo  # [B, N] rows of the item tables
        out = torch.empty(rows.shape[0], rows.shape[1])
        for b in range(users.shape[0]):
            out[b] = self._score(users[b], self.item_first[rows[b]], self.item_mf[rows[b]])
        return out, self.export_id.expand(users.shape[0], 1)


def to_precision(module: nn.Module, precision: str) -> nn.Module:
    """Store ``module``'s hidden layers after the first (``rest``) in ``precision``; in place.

    Works on the eager module and on its TorchScript (``torch.jit.load``) alike.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {PRECISIONS}")
    module.rest.to(torch.bfloat16 if precision == "bf16" else torch.float32)
    return module
