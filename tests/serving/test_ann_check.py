"""The export's check of the two-stage path: recall of the exact top-k among the candidates,
hand-computed cases (a Flat index is exact, so the candidates are known)."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.serving.ann_check import candidate_recall, choose, recommend_parameters
from ncf.serving.repository import project_repo

# One user; item i's GMF inner product with the user is i: the index ranks 5, 4, 3, 2, 1, 0.
USERS = np.array([[1.0]])
ITEMS = np.arange(6, dtype=np.float32).reshape(6, 1)
FLAT = {"ann_index": "Flat", "ann_candidates": "2", "ann_ef_search": "16"}


@pytest.mark.parametrize(
    ("scores", "rated", "want"),
    [
        ([0, 1, 2, 3, 9, 8], [], 1.0),  # exact top-2 {4, 5} = the 2 nearest
        ([9, 1, 2, 3, 4, 8], [], 0.5),  # exact {0, 5}: 0 is the farthest
        ([9, 8, 2, 3, 4, 5], [], 0.0),
        # 5 rated: 2 + 1 neighbours {5, 4, 3}, 5 dropped; exact without 5: {4, 0}
        ([9, 1, 2, 3, 8, 7], [5], 0.5),
        ([0, 1, 2, 7, 8, 9], [5], 1.0),  # exact without 5: {4, 3}
    ],
)
def test_recall_of_the_exact_top_k(scores, rated, want):
    got = candidate_recall(
        np.array([scores], dtype=np.float32), [np.array(rated, dtype=np.int64)], USERS, ITEMS,
        FLAT, k=2,
    )  # fmt: skip
    assert got == pytest.approx(want)


def test_mean_over_users():
    scores = np.array([[0, 1, 2, 3, 9, 8], [9, 8, 2, 3, 4, 5]], dtype=np.float32)
    rated = [np.array([], dtype=np.int64)] * 2
    got = candidate_recall(scores, rated, np.ones((2, 1)), ITEMS, FLAT, k=2)
    assert got == pytest.approx(0.5)


def test_the_committed_config_names_every_setting_of_the_check():
    params = recommend_parameters(project_repo())
    assert params["candidates"] == "auto"
    assert int(params["ann_candidates"]) > 0 and 0 < float(params["ann_min_recall"]) <= 1
    assert params["ann_index"] == "auto" and int(params["ann_ef_search"]) > 0


@pytest.mark.parametrize(
    ("recall", "n_items", "want"),
    [(0.995, 26_744, "ann"), (0.99, 2_001, "ann"), (0.989, 26_744, "exact"), (1.0, 2_000, "exact")],
)
def test_auto_chooses_ann_only_when_exact_enough_and_worth_it(recall, n_items, want):
    params = {"ann_candidates": "1000", "ann_min_recall": "0.99"}
    assert choose(recall, params, n_items) == want
