"""Cold start from history: a user outside the training data, scored from the items they rated.

``recommend`` takes an optional ``history`` (raw movieIds the user interacted with). For a user
with no embedding row, ``FoldIn`` finds the user's two vectors (GMF ``[F]``, MLP ``[half]``) that
fit that history with everything else frozen, then scores the catalogue with them like a known
user (``CatalogueNeuMF``'s tables: the item half of the first MLP layer precomputed).

The fit: binary cross-entropy of the history items (label 1) and ``negatives`` items per history
item drawn uniformly from the catalogue (label 0; a draw that is a history item is left out),
plus ``l2`` times the squared distance of the vectors from their start, minimised by ``steps``
Adam steps of rate ``lr``. The start is the mean vector of the trained users (the "average
user"), so a fit of zero steps ranks like an average user. The draws are seeded by the history
itself (``_draw``): the same history gets the same answer. There is no closed form: the MLP tower is not
linear in the user's vector.
"""

from __future__ import annotations

import io

import torch

from ncf.models.neumf import NeuMF
from ncf.serving.catalogue import CatalogueNeuMF


class FoldIn(CatalogueNeuMF):
    """``history [H]`` item model ids (inside the catalogue) -> probabilities ``[C]`` of items
    ``lo .. hi - 1`` for a user who rated them; ``fit`` returns the user's vectors alone.

    The user tables of ``CatalogueNeuMF`` are dropped: a folded-in user has no row.
    """

    def __init__(self, model: NeuMF, item_range: list[int], user_range: list[int]):
        super().__init__(model, *item_range)
        users = slice(*user_range)  # the trained users' rows (reserved ids left out)
        with torch.no_grad():
            self.register_buffer("start_mlp", model.mlp_user_embed.weight[users].mean(0))  # [half]
            self.register_buffer("start_mf", model.mf_user_embed.weight[users].mean(0))  # [F]
        self.user_mlp = torch.empty(0, self.start_mlp.shape[0])
        self.user_mf = torch.empty(0, self.start_mf.shape[0])

    @torch.jit.export
    def fit(
        self, history: torch.Tensor, steps: int, lr: float, l2: float, negatives: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The user's (MLP ``[half]``, GMF ``[F]``) vectors fitted to ``history [H]``."""
        rows = torch.unique(history - self.item_lo)  # [P] catalogue rows of the positives
        drawn = self._draw(rows, rows.shape[0] * negatives)
        drawn = drawn[~torch.isin(drawn, rows)]  # [N']
        train = torch.cat((rows, drawn))  # [T = P + N']
        label = torch.cat((torch.ones(rows.shape[0]), torch.zeros(drawn.shape[0])))
        first, mf = self.item_first[train], self.item_mf[train]  # [T, H1], [T, F]
        half = self.start_mlp.shape[0]
        start = torch.cat((self.start_mlp, self.start_mf))  # [half + F]: both vectors, one Adam
        x, m, v = start.clone(), torch.zeros_like(start), torch.zeros_like(start)
        for step in range(1, steps + 1):
            g = self.gradient(x[:half], x[half:], first, mf, label) + 2 * l2 * (x - start)
            m.mul_(0.9).add_(g, alpha=0.1)  # Adam, betas (0.9, 0.999), bias-corrected
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            x -= lr * (m / (1 - 0.9**step)) / ((v / (1 - 0.999**step)).sqrt() + 1e-8)
        return x[:half], x[half:]

    def _draw(self, rows: torch.Tensor, count: int) -> torch.Tensor:
        """``count`` catalogue rows ``[count]``, seeded by the history's ``rows``: the same
        history, the same draws. A hash of (seed, counter) in int64 tensor ops, Park-Miller
        multiplications around an xor-shift (every product stays below 2**47), since TorchScript
        has no torch.Generator in torch 2.1."""
        modulus = 2147483647
        seed = torch.sum(rows * 48271 % modulus) % modulus + 1  # in [1, modulus)
        x = seed * (torch.arange(count) + 1) % modulus * 48271 % modulus
        x = torch.bitwise_xor(x, torch.bitwise_right_shift(x, 13))  # not linear in the counter
        x = x * 48271 % modulus
        return x % self.item_first.shape[0]

    @torch.jit.export
    def gradient(
        self,
        user_mlp: torch.Tensor,
        user_mf: torch.Tensor,
        first: torch.Tensor,
        mf: torch.Tensor,
        label: torch.Tensor,
    ) -> torch.Tensor:
        """The gradient ``[half + F]`` of the mean binary cross-entropy of items ``first``
        ``[T, H1]``, ``mf`` ``[T, F]`` with ``label`` ``[T]`` with respect to the user's
        (MLP, GMF) vectors: back-propagation by hand, no autograd graph per step."""
        h = first + user_mlp @ self.user_first  # [T, H1]
        pre: list[torch.Tensor] = [h]  # each layer's output before its ReLU
        weights: list[torch.Tensor] = []  # rest's weights (a ModuleList takes no variable index)
        if self.has_hidden:
            h = torch.relu(h)
        for layer in self.rest:
            h = layer(h)
            pre.append(h)
            weights.append(layer.weight)
            h = torch.relu(h)
        logits = mf @ (user_mf * self.final_mf) + h @ self.final_mlp + self.final_bias
        d = (torch.sigmoid(logits) - label) / label.shape[0]  # dLoss/dlogit [T]
        grad_mf = (d @ mf) * self.final_mf  # [F]
        g = d.unsqueeze(1) * self.final_mlp  # [T, H_last], dLoss/d(last activation)
        for i in range(len(weights) - 1, -1, -1):
            g = g * (pre[i + 1] > 0)  # through the ReLU of rest[i]
            g = g @ weights[i]  # [T, width of its input]
        if self.has_hidden:
            g = g * (pre[0] > 0)
        return torch.cat((g.sum(0) @ self.user_first.T, grad_mf))  # [half + F]

    @torch.jit.export
    def score_rows(
        self, user_mlp: torch.Tensor, user_mf: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor:
        """Probabilities ``[N]`` of catalogue rows ``rows [N]`` (item id - lo) for the user's
        vectors: the two-stage path's re-ranking (the candidates of the GMF query
        ``user_mf * final_mf``)."""
        first, mf = self.item_first[rows], self.item_mf[rows]
        return torch.sigmoid(self._logits(user_mlp, user_mf, first, mf))

    @torch.jit.export
    def query(self, user_mf: torch.Tensor) -> torch.Tensor:
        """The GMF query ``[F]`` of the user's GMF vector (what ``gmf.npz``'s users hold)."""
        return user_mf * self.final_mf

    def forward(  # type: ignore[override]
        self, history: torch.Tensor, steps: int, lr: float, l2: float, negatives: int
    ) -> torch.Tensor:
        user_mlp, user_mf = self.fit(history, steps, lr, l2, negatives)
        return torch.sigmoid(self._logits(user_mlp, user_mf, self.item_first, self.item_mf))


def to_foldin(model: NeuMF, meta: dict) -> bytes:
    """Script ``FoldIn`` over the metadata's item and user ranges; return the serialized module."""
    scripted = torch.jit.script(FoldIn(model, meta["item_id_range"], meta["user_id_range"]).eval())
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    return buf.getvalue()


def check_foldin(model: NeuMF, fold_bytes: bytes, meta: dict, seed: int) -> float:
    """Max abs difference of the loaded module's probabilities vs eager ``FoldIn`` for a random
    history of 5 catalogue items (5 steps)."""
    scripted = torch.jit.load(io.BytesIO(fold_bytes), map_location="cpu").eval()
    eager = FoldIn(model, meta["item_id_range"], meta["user_id_range"]).eval()
    gen = torch.Generator().manual_seed(seed)
    history = torch.randint(*meta["item_id_range"], (5,), generator=gen)
    args = (5, 0.05, 0.0, 4)
    return float((scripted(history, *args) - eager(history, *args)).abs().max())
