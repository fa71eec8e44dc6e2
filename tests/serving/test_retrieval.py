"""ncf.serving.retrieval: the one top-k (score descending, then item id ascending) and the
two-stage candidate search shared by ann_check, bench recommend and the recommend model."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from ncf.serving import retrieval


def _reference(items, scores, k):
    order = np.lexsort((items, -scores))[:k]
    return items[order], scores[order]


def test_top_k_breaks_ties_by_the_lower_item_id():
    items = np.array([9, 3, 7, 1, 5])
    scores = np.array([0.5, 0.9, 0.5, 0.5, 0.1], dtype=np.float32)
    got, best = retrieval.top_k(items, scores, 3)
    assert got.tolist() == [3, 1, 7] and best.tolist() == pytest.approx([0.9, 0.5, 0.5])


@pytest.mark.parametrize("seed", range(20))
def test_top_k_rows_equal_a_full_sort(seed):
    rng = np.random.default_rng(seed)
    b, n, k = 3, int(rng.integers(1, 40)), int(rng.integers(1, 45))
    scores = rng.integers(0, 4, (b, n)).astype(np.float32)  # many ties
    scores[rng.random((b, n)) < 0.2] = -np.inf
    items = np.stack([rng.permutation(100)[:n] for _ in range(b)])
    got_items, got_scores = retrieval.top_k(items, scores, k)
    assert got_items.shape == (b, min(k, n))
    for r in range(b):
        want_items, want_scores = _reference(items[r], scores[r], k)
        np.testing.assert_array_equal(got_items[r], want_items)
        np.testing.assert_array_equal(got_scores[r], want_scores)


def test_top_k_of_nothing_is_empty():
    got, best = retrieval.top_k(np.zeros(0, np.int64), np.zeros(0, np.float32), 5)
    assert got.shape == best.shape == (0,)


def test_candidates_are_the_nearest_by_inner_product_and_reranked():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    items, queries = rng.normal(size=(50, 4)), rng.normal(size=(3, 4))
    index = retrieval.build_index(items, "Flat")
    n = retrieval.candidate_count(50, k=2, ann_candidates=5, blocked=1)
    positions = retrieval.search(index, queries, n, ef_search=16)
    assert n == 6 and positions.shape == (3, 6)
    want = np.argsort(-(queries @ items.T), axis=1, kind="stable")[:, :6]
    np.testing.assert_array_equal(positions, want)
    scores = retrieval.rerank(
        np.where(positions == positions[0, 0], -1, positions), lambda i: i * 1.0, 3
    )
    assert np.isneginf(scores[0, 0]) and scores[0, 1] == positions[0, 1] + 3


def test_imports_only_numpy_and_faiss():
    """The recommend model imports the exported copy, so the source imports no project code."""
    tree = ast.parse(Path(retrieval.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"numpy", "faiss"}


@pytest.mark.parametrize(
    ("spec", "n_items", "want"),
    [
        ("auto", 9_724, "Flat"),
        ("auto", retrieval.FLAT_MAX_ITEMS, "Flat"),
        ("auto", retrieval.FLAT_MAX_ITEMS + 1, "HNSW32"),
        ("HNSW32", 10, "HNSW32"),
        ("Flat", 10**7, "Flat"),
    ],
)
def test_auto_index_is_exhaustive_up_to_its_limit(spec, n_items, want):
    assert retrieval.index_spec(spec, n_items) == want


def test_auto_builds_the_exact_search_for_a_small_catalogue():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    items = rng.standard_normal((500, 8)).astype(np.float32)
    query = rng.standard_normal((1, 8)).astype(np.float32)
    found = retrieval.search(retrieval.build_index(items, "auto"), query, 50, 16)[0]
    assert found.tolist() == np.argsort(-(items @ query[0]), kind="stable")[:50].tolist()
