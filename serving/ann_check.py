"""Does the two-stage path find the exact top-k? Measured at export; it picks what is served.

``recommend``'s two-stage path (``candidates`` ann) scores only the items nearest to the user's GMF
vector in a faiss index; ``candidates`` auto (the default) serves it when the export measured
that, for sampled users, those candidates held the exact top-k (``ann_min_recall``), and the
exact path otherwise. The check uses the parameters of the committed ``recommend`` config, builds
the index as the model does, and the fp32 catalogue scorer gives the exact top-k; the result is
``checks.ann`` of the manifest (``serves``: "ann" or "exact").
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import torch

from ncf.core import names
from ncf.serving import retrieval

CHECK_USERS = 256  # users sampled for the recall (seeded); exact scores cost [users, catalogue]
# The settings that decide the two-stage path, as recommend's config.pbtxt names them.
ANN_PARAMETERS = ("ann_index", "ann_candidates", "ann_ef_search", "ann_min_recall")
_PARAMETER = re.compile(r'key:\s*"(\w+)",\s*value:\s*\{\s*string_value:\s*"([^"]*)"\s*\}')


def recommend_parameters(repo: str | Path) -> dict[str, str]:
    """The ``parameters`` of ``repo``'s ``recommend/config.pbtxt`` (key -> string value)."""
    path = Path(repo) / names.MODEL_RECOMMEND / "config.pbtxt"
    return dict(_PARAMETER.findall(path.read_text(encoding="utf-8")))


def candidate_recall(
    scores: np.ndarray,
    rated: list[np.ndarray],
    users: np.ndarray,
    items: np.ndarray,
    params: dict[str, str],
    k: int = 10,
) -> float:
    """Mean share of each user's exact top-``k`` that the two-stage candidates contain.

    ``scores [U, C]`` exact scores, ``rated`` per user the catalogue positions it rated (never
    recommended), ``users [U, F]`` / ``items [C, F]`` GMF vectors (inner product = GMF logit).
    As ``recommend`` does, the search asks for ``ann_candidates`` plus the rated count neighbours.
    """
    n_items = items.shape[0]
    index = retrieval.build_index(items, params["ann_index"])
    first = max(k, int(params["ann_candidates"]))  # a one-user request asks for first + rated
    n = retrieval.candidate_count(n_items, k, first, max((len(r) for r in rated), default=0))
    found = retrieval.search(index, users, n, params["ann_ef_search"])  # [U, n], -1: none
    shares = []
    for row, blocked in enumerate(rated):
        masked = scores[row].astype(np.float64)  # [C]
        masked[blocked] = -np.inf
        top = min(k, n_items - len(blocked))
        exact = retrieval.top_k(np.arange(n_items), masked, top)[0]
        candidates = found[row, : first + len(blocked)]
        shares.append(np.isin(exact, candidates).mean() if top else 1.0)
    return float(np.mean(shares))


def check_ann(
    cat_bytes: bytes,
    gmf: dict[str, np.ndarray],
    seen: dict[str, np.ndarray],
    meta: dict,
    params: dict[str, str],
    seed: int,
    users: int = CHECK_USERS,
    k: int = 10,
) -> dict:
    """``checks.ann`` of the manifest: the recall, the settings it was measured with, ``serves``.

    ``gmf`` and ``seen`` are the arrays of the export's ``gmf.npz`` and ``seen.npz``.
    """
    settings = {key: params[key] for key in ANN_PARAMETERS}
    lo, hi = meta["item_id_range"]
    rng = np.random.default_rng(seed)
    first, end = meta["user_id_range"]
    ids = np.sort(rng.choice(np.arange(first, end), min(users, end - first), replace=False))
    scorer = torch.jit.load(io.BytesIO(cat_bytes), map_location="cpu").eval()
    with torch.no_grad():
        scores = scorer(torch.from_numpy(ids).reshape(-1, 1))[0].numpy()  # [U, C] fp32
    indptr, indices = seen["indptr"], seen["indices"]
    rated = [indices[indptr[u] : indptr[u + 1]] - lo for u in ids]
    result = {"settings": settings, "users": len(ids)}
    try:
        recall = candidate_recall(scores, rated, gmf["users"][ids], gmf["items"], params, k)
    except ImportError as exc:
        return {**result, "error": str(exc), "serves": "exact"}
    return {**result, f"recall@{k}": round(recall, 4), "serves": choose(recall, params, hi - lo)}


def choose(recall: float, params: dict[str, str], n_items: int) -> str:
    """What ``candidates`` auto serves: "ann" if its measured ``recall`` reaches
    ``ann_min_recall`` and its candidates are under half of the ``n_items`` catalogue (at half
    or more the path could save at most half of the scoring, and it adds the index search)."""
    worth_it = 2 * int(params["ann_candidates"]) < n_items
    return "ann" if worth_it and recall >= float(params["ann_min_recall"]) else "exact"
