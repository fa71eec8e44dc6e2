"""Top-k selection and the two-stage candidate search: the one source of both.

Used in process by ``ncf.serving.ann_check`` and ``ncf.bench.recommend``, and by the ``recommend``
python model in Triton through the copy that ``ncf export`` writes beside its ``model.py``
(imported there as ``retrieval``). So this module imports numpy and, where an index is built,
faiss, and nothing of the project.

The two-stage path: the catalogue's GMF item vectors ``items [C, F]`` go into a faiss
inner-product index; a user's GMF query vector (GMF user vector times the output layer's GMF
weights, see ``ncf.serving.export.gmf_tables``) finds its ``n`` nearest items, whose catalogue
positions the network then re-ranks. Positions are item model ids minus the catalogue's first id.

The tie rule of every top-k: score descending, then item id ascending.
"""

import numpy as np


def top_k(items, scores, k):
    """The ``k`` best (items, scores) of each row, best first: score descending, then item id
    ascending.

    ``items`` and ``scores`` are ``[N]`` or ``[B, N]`` (one row per user); the result has the
    same rank with ``min(k, N)`` columns. A NaN score ranks as -inf.
    """
    items, scores = np.asarray(items), np.asarray(scores)
    if items.ndim == 1:
        best_items, best_scores = top_k(items[None], scores[None], k)
        return best_items[0], best_scores[0]
    k = min(k, scores.shape[1])
    if k == 0:
        return items[:, :0], scores[:, :0]
    keys = np.where(np.isnan(scores), -np.inf, scores)
    part = np.argpartition(-keys, k - 1, axis=1)[:, :k]  # [B, k] columns: some k best, unordered
    kth = np.take_along_axis(keys, part, 1).min(1, keepdims=True)
    for r in np.flatnonzero((keys >= kth).sum(1) > k):  # a column outside ties the k-th score
        cols = np.flatnonzero(keys[r] >= kth[r])
        part[r] = cols[np.lexsort((items[r, cols], -keys[r, cols]))[:k]]
    order = np.lexsort((np.take_along_axis(items, part, 1), -np.take_along_axis(keys, part, 1)))
    part = np.take_along_axis(part, order, 1)
    return np.take_along_axis(items, part, 1), np.take_along_axis(scores, part, 1)


# "auto" searches every item ("Flat", exact) up to this catalogue size and a graph ("HNSW32")
# above: for the ~1,000 candidates a query asks for, the exhaustive search was faster at every
# size measured up to 100,000 items, finds the exact neighbours and needs no build at load
# (docs/RECOMMEND.md has the figures).
FLAT_MAX_ITEMS = 100_000


def index_spec(spec, n_items):
    """The faiss ``index_factory`` string that ``spec`` means for a catalogue of ``n_items``."""
    if spec != "auto":
        return spec
    return "Flat" if n_items <= FLAT_MAX_ITEMS else "HNSW32"


def build_index(items, spec, threads=None):
    """A faiss inner-product index of ``spec`` (e.g. "HNSW32", "Flat", or "auto": see
    ``index_spec``) over ``items [C, F]``; ``threads`` sets faiss's OpenMP pool of this process
    (None: faiss's default, every core)."""
    import faiss  # only the two-stage path needs it (faiss-cpu, pinned in pyproject.toml)

    if threads is not None:
        faiss.omp_set_num_threads(int(threads))

    vectors = np.ascontiguousarray(items, dtype=np.float32)
    spec = index_spec(spec, vectors.shape[0])
    index = faiss.index_factory(vectors.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    return index


def candidate_count(n_items, k, ann_candidates, blocked=0):
    """Neighbours to ask for so that ``max(k, ann_candidates)`` remain once up to ``blocked``
    rated or excluded items are dropped (at most the catalogue, ``n_items``)."""
    return min(n_items, max(k, ann_candidates) + blocked)


def search(index, queries, n, ef_search):
    """Catalogue positions ``[U, n]`` of the ``n`` items nearest to each GMF query ``[U, F]``,
    nearest first; -1 where the index found fewer. HNSW returns at most efSearch neighbours, so
    efSearch is raised to ``n`` where ``ef_search`` is smaller."""
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = max(int(ef_search), n)
    _, positions = index.search(np.ascontiguousarray(queries, dtype=np.float32), n)
    return positions


def rerank(positions, score, lo):
    """Network scores ``[U, n]`` of the candidates at ``positions [U, n]``; -inf where none.

    ``score`` maps item model ids ``[U, n]`` (the catalogue starts at id ``lo``) to scores.
    """
    found = positions >= 0
    scores = score(np.where(found, positions, 0) + lo)
    return np.where(found, scores, -np.inf)
