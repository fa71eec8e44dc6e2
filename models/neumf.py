"""NeuMF (He et al., 2017) as DeepLearningExamples defines it: GMF and MLP towers, one output.

Shapes: ``user``/``item`` are int64 ``[B]`` model ids; ``forward`` returns logits ``[B]`` (apply
``torch.sigmoid`` for probabilities; training uses ``BCEWithLogitsLoss``). With ``towers`` "gmf"
or "mlp" the model is one tower alone (the paper's GMF or MLP, what NeuMF pretraining trains).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from itertools import pairwise

import torch
from torch import nn

from ncf.models.dropout import dropout, relu_dropout
from ncf.models.embedding_grad import StepGradients, lookup

DROPOUT_AT = ("relu", "input")  # after each MLP ReLU (DLE), or before each MLP Linear (RecBole)
LINEAR_INITS = ("dle", "torch")  # Glorot/LeCun uniform (DLE), or PyTorch's default (RecBole)
TOWERS = ("both", "gmf", "mlp")  # NeuMF, or its GMF or MLP tower alone


@dataclass
class NeuMFConfig:
    num_users: int  # user embedding rows (Categorify cardinality, reserved low ids included)
    num_items: int  # item embedding rows (likewise)
    factors: int = 64  # GMF embedding width (DLE --factors)
    mlp_layers: list[int] = field(default_factory=lambda: [256, 256, 128, 64])  # MLP widths; the
    # first is the concatenated user+item MLP embedding, so each MLP embedding is mlp_layers[0] // 2
    dropout: float = 0.5  # MLP dropout rate (DLE default 0.5)
    dropout_at: str = "relu"  # "relu": after each MLP ReLU (DLE); "input": before each MLP Linear,
    # the concatenated MLP embeddings included (RecBole's MLPLayers)
    linear_init: str = "dle"  # "dle": MLP Glorot, final LeCun uniform; "torch": nn.Linear's own
    l2: float = 0.0  # per-example L2 on the batch's embedding rows (0: none, as DLE)
    towers: str = "both"  # "gmf" / "mlp": that tower alone, its output straight into ``final``

    def __post_init__(self) -> None:
        if self.num_users < 1 or self.num_items < 1:
            raise ValueError(
                f"num_users={self.num_users}, num_items={self.num_items}: both must be >= 1 "
                "(take them from the ETL's metadata.json)"
            )
        if len(self.mlp_layers) < 1 or self.mlp_layers[0] % 2:
            raise ValueError(
                f"mlp_layers={self.mlp_layers}: need at least one layer and an even first width "
                "(it is split between the user and item MLP embeddings), e.g. 256,256,128,64"
            )
        if not 0.0 <= self.dropout < 1.0 or self.l2 < 0:
            raise ValueError(
                f"dropout={self.dropout}, l2={self.l2}: need 0 <= dropout < 1, l2 >= 0"
            )
        for name, allowed in (("dropout_at", DROPOUT_AT), ("linear_init", LINEAR_INITS),
                              ("towers", TOWERS)):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: use one of {allowed}")
        self.mlp_layers = [int(x) for x in self.mlp_layers]

    def to_dict(self) -> dict:
        """Plain dict (ints, floats, lists) that ``torch.load(weights_only=True)`` can read back."""
        return asdict(self)


def _uniform(layer: nn.Linear, fan: int) -> None:
    """Weights U(-a, a) with a = sqrt(6 / fan), bias 0: Glorot uniform for ``fan`` = fan_in +
    fan_out, LeCun uniform (a = sqrt(3 / fan_in)) for ``fan`` = 2 fan_in."""
    nn.init.uniform_(layer.weight, -math.sqrt(6.0 / fan), math.sqrt(6.0 / fan))
    nn.init.zeros_(layer.bias)


class NeuMF(nn.Module):
    """Generalized matrix factorization + MLP over user/item embeddings, concatenated into one logit."""

    # Constants: TorchScript compiles only the branches of the towers that exist.
    __constants__ = ["use_gmf", "use_mlp"]

    def __init__(self, cfg: NeuMFConfig):
        super().__init__()
        self.cfg, widths = cfg, cfg.mlp_layers
        self.use_gmf, self.use_mlp = cfg.towers != "mlp", cfg.towers != "gmf"
        if self.use_gmf:
            self.mf_user_embed = nn.Embedding(cfg.num_users, cfg.factors)
            self.mf_item_embed = nn.Embedding(cfg.num_items, cfg.factors)
        if self.use_mlp:
            self.mlp_user_embed = nn.Embedding(cfg.num_users, widths[0] // 2)
            self.mlp_item_embed = nn.Embedding(cfg.num_items, widths[0] // 2)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths) if self.use_mlp)
        # Packed keep bits per MLP layer for the next training forward (set by the trainer so that
        # masks do not depend on how a global batch is split); None draws them here.
        self.dropout_bits: list[torch.Tensor] | None = None
        self.final = nn.Linear(widths[-1] * self.use_mlp + cfg.factors * self.use_gmf, 1)
        # L2 term (summed over the examples) of the last training forward, which the trainer adds
        # to the summed BCE; 0.0 while l2 is 0.
        self.last_penalty: torch.Tensor | float = 0.0
        # Set by the trainer: the tables' gradients accumulate over a step's micro-batches into
        # one dense buffer each (models/embedding_grad.py); None: nn.Embedding's own backward.
        self.step_grads: StepGradients | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DLE's initialisation: embeddings N(0, 0.01), MLP Glorot uniform, final LeCun uniform
        (``linear_init`` "torch": the Linear layers keep nn.Linear's default)."""
        for emb in self.modules():
            if isinstance(emb, nn.Embedding):
                nn.init.normal_(emb.weight, 0.0, 0.01)
        for layer in (*self.mlp, self.final):
            if self.cfg.linear_init == "torch":
                layer.reset_parameters()
            else:
                fan_out, fan_in = layer.weight.shape
                _uniform(layer, 2 * fan_in if layer is self.final else fan_in + fan_out)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """Logits ``[B]`` for int64 ids ``user [B]`` and ``item [B]``."""
        # The embedding rows of the towers there are: GMF's user, item [B, factors], then MLP's
        # user, item [B, mlp0 / 2].
        # A scripted model never trains: it compiles only the first branch.
        if torch.jit.is_scripting() or not self.training:
            rows = self._lookups(user, item)
        else:
            rows = self._lookups_train(user, item)
            self._set_penalty(rows)
        parts: list[torch.Tensor] = []  # [B, factors] (GMF), then [B, mlp_layers[-1]] (MLP)
        if self.use_gmf:
            parts.append(rows[0] * rows[1])
        if self.use_mlp:
            if self.training:
                x = self._mlp_train(rows[-2], rows[-1])
            else:
                x = torch.cat((rows[-2], rows[-1]), dim=1)  # [B, mlp0]
                for layer in self.mlp:
                    x = torch.relu(layer(x))  # [B, width]
            parts.append(x)
        return self.final(torch.cat(parts, dim=1)).squeeze(1)  # [B]

    def _lookups(self, user: torch.Tensor, item: torch.Tensor) -> list[torch.Tensor]:
        rows: list[torch.Tensor] = []
        if self.use_gmf:
            rows += [self.mf_user_embed(user), self.mf_item_embed(item)]
        if self.use_mlp:
            rows += [self.mlp_user_embed(user), self.mlp_item_embed(item)]
        return rows

    # The trainer's interface (ncf.models.kinds.TrainedModel); not part of the scripted model.
    @torch.jit.unused
    def dropout_widths(self):
        """Widths of the activations dropout applies to: the MLP layers' outputs
        (``mlp_layers[1:]``), or with ``dropout_at`` "input" their inputs (``mlp_layers[:-1]``)."""
        widths = self.cfg.mlp_layers if self.use_mlp else []
        return list(widths[:-1] if self.cfg.dropout_at == "input" else widths[1:])

    @torch.jit.unused
    def set_dropout_bits(self, bits):
        """Keep bits ``[rows, ceil(width / 8)]`` per MLP layer for the next training forward."""
        self.dropout_bits = bits

    @torch.jit.unused
    def penalty(self):
        """The L2 term of the last training forward (0.0 while ``l2`` is 0)."""
        return self.last_penalty

    @torch.jit.unused
    def _lookups_train(self, user, item):
        """The training batch's embedding rows (as ``_lookups``), through ``step_grads`` when set."""
        tables = [self.mf_user_embed, self.mf_item_embed] if self.use_gmf else []
        tables += [self.mlp_user_embed, self.mlp_item_embed] if self.use_mlp else []
        return [
            lookup(t, ids, self.step_grads)
            for t, ids in zip(tables, [user, item] * (len(tables) // 2), strict=True)
        ]

    @torch.jit.unused
    def _set_penalty(self, rows):
        """``l2`` times the squared batch rows of every embedding (``rows``: ``_lookups``')."""
        if self.cfg.l2 > 0 and torch.is_grad_enabled():
            self.last_penalty = self.cfg.l2 * sum(r.square().sum() for r in rows)

    # Unannotated: TorchScript cannot resolve the string type hints of an unused method.
    @torch.jit.unused
    def _mlp_train(self, user, item):
        """Training MLP on the MLP rows ``user``, ``item [B, mlp0 / 2]``: ``dropout(relu(layer(x)))``
        per layer (DLE), or ``relu(layer(dropout(x)))`` with ``dropout_at`` "input" (RecBole);
        masks as models/dropout.py draws them."""
        bits = self.dropout_bits or [None] * len(self.mlp)
        p, at_input = self.cfg.dropout, self.cfg.dropout_at == "input"
        if at_input or not self.mlp:
            x = torch.cat((user, item), dim=1)  # [B, mlp0]
            for layer, b in zip(self.mlp, bits, strict=True):
                if at_input:
                    x = torch.relu(layer(dropout(x, p, b)))  # [B, width]
                else:
                    x = relu_dropout(layer(x), p, b)  # [B, width]
            return x
        # The first layer on its input's halves, W[:, :h] user + W[:, h:] item + bias: no
        # [B, mlp0] concatenation, and each table's gradient comes back contiguous (index_add_
        # takes twice as long on a strided one). In-place ops are not autocast: the second
        # product takes the first's dtype. Under autocast the user half is rounded to it before
        # the item half is added: the eval path (concatenation) agrees to that rounding.
        first, half = self.mlp[0], user.shape[1]
        x = torch.addmm(first.bias, user, first.weight[:, :half].t())  # [B, mlp1]
        x = x.addmm_(item.to(x.dtype), first.weight[:, half:].t().to(x.dtype))
        for k, b in zip(range(len(self.mlp)), bits, strict=True):
            x = relu_dropout(x if k == 0 else self.mlp[k](x), p, b)  # [B, mlp_layers[k + 1]]
        return x
