"""NeuMF scoring the whole catalogue for one user, with the user-independent work done at export.

``recommend`` scores every item for one user per request. NeuMF's first MLP layer acts on
``[user_embedding | item_embedding]``, so it splits into a user half and an item half; the item
half (plus the bias) is the same for every request and is computed once here, a ``[C, H1]`` table.
A request then adds the user's half and runs the remaining layers: for DLE's 256-256-128-64 MLP
that skips ~60% of the multiply-adds of scoring ``C`` (user, item) pairs with the full network.
The probabilities equal ``ServingNeuMF`` on the same pairs up to float rounding (``ncf export``
checks them against it).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from models.neumf import NeuMF


class CatalogueNeuMF(nn.Module):
    """``user_id [1, 1]`` int64 -> probabilities ``[1, C]`` fp32 of items ``lo .. hi - 1``.

    The forward() argument name is the Triton input name (the libtorch backend binds by name).
    """

    def __init__(self, model: NeuMF, item_lo: int, item_hi: int):
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
        self.rest = nn.ModuleList(copy.deepcopy(layer) for layer in model.mlp[1:])
        self.rest.requires_grad_(False)

    def forward(self, user_id: torch.Tensor) -> torch.Tensor:
        u = user_id.reshape(-1)[0]  # 0-dim index
        h = self.item_first + self.user_mlp[u] @ self.user_first  # [C, H1]
        if self.has_hidden:
            h = torch.relu(h)
        for layer in self.rest:
            h = torch.relu(layer(h))  # [C, width]
        logits = self.item_mf @ (self.user_mf[u] * self.final_mf) + h @ self.final_mlp
        return torch.sigmoid(logits + self.final_bias).unsqueeze(0)  # [1, C]
