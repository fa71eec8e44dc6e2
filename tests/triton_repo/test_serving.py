"""A real tritonserver answers like direct PyTorch and the saved NVTabular Workflow (HTTP and gRPC)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from ncf import names
from serving.client import infer
from tests.triton_repo import etl_fixture

pytestmark = pytest.mark.triton


def _meta(etl_dir):
    return json.loads((etl_dir / names.METADATA_FILE).read_text())


def _eager_scores(eager, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return eager(torch.tensor(users), torch.tensor(items)).numpy()


@pytest.mark.parametrize("batch", [1, 1024])
def test_neumf_equals_pytorch(client, etl_dir, eager, batch):
    meta, rng = _meta(etl_dir), np.random.default_rng(batch)
    users = rng.integers(*meta["user_id_range"], size=(batch, 1))
    items = rng.integers(*meta["item_id_range"], size=(batch, 1))
    out = infer(
        client,
        names.MODEL_NEUMF,
        {names.INPUT_USER: users, names.INPUT_ITEM: items},
        [names.OUTPUT_SCORE],
    )
    score = out[names.OUTPUT_SCORE]
    assert score.dtype == np.float32 and score.shape == (batch, 1)
    np.testing.assert_allclose(score, _eager_scores(eager, users, items), rtol=0, atol=1e-5)


def _raw_ids(etl_dir, rng, n):
    """Known raw ids from the ratings plus unseen ones (0, negative, above every known id)."""
    ratings = pd.read_csv(etl_fixture.RATINGS)
    users = rng.choice(ratings[names.RAW_USER].unique(), n)
    items = rng.choice(ratings[names.RAW_ITEM].unique(), n)
    users[:3] = [0, -7, ratings[names.RAW_USER].max() + 1]
    items[3:6] = [0, -7, ratings[names.RAW_ITEM].max() + 1]
    known = np.isin(users, ratings[names.RAW_USER]) & np.isin(items, ratings[names.RAW_ITEM])
    return users.reshape(-1, 1).astype(np.int64), items.reshape(-1, 1).astype(np.int64), known


def test_workflow_equals_workflow_transform(client, etl_dir, workflow):
    users, items, known = _raw_ids(etl_dir, np.random.default_rng(1), 500)
    out = infer(
        client,
        names.MODEL_WORKFLOW,
        {names.INPUT_RAW_USER: users, names.INPUT_RAW_ITEM: items},
        [names.INPUT_USER, names.INPUT_ITEM, names.OUTPUT_KNOWN],
    )
    want_users, want_items = etl_fixture.transform(workflow, users[:, 0], items[:, 0])
    np.testing.assert_array_equal(out[names.INPUT_USER][:, 0], want_users)
    np.testing.assert_array_equal(out[names.INPUT_ITEM][:, 0], want_items)
    np.testing.assert_array_equal(out[names.OUTPUT_KNOWN][:, 0], known)
    assert not known[:6].any() and known[6:].mean() == 1.0  # the unseen ids are flagged


def test_ensemble_equals_workflow_then_neumf(client, etl_dir, eager):
    users, items, known = _raw_ids(etl_dir, np.random.default_rng(2), 300)
    raw = {names.INPUT_RAW_USER: users, names.INPUT_RAW_ITEM: items}
    ens = infer(client, names.MODEL_ENSEMBLE, raw, [names.OUTPUT_SCORE, names.OUTPUT_KNOWN])
    ids = infer(client, names.MODEL_WORKFLOW, raw, [names.INPUT_USER, names.INPUT_ITEM])
    step = infer(client, names.MODEL_NEUMF, ids, [names.OUTPUT_SCORE])
    np.testing.assert_array_equal(ens[names.OUTPUT_SCORE], step[names.OUTPUT_SCORE])
    np.testing.assert_array_equal(ens[names.OUTPUT_KNOWN][:, 0], known)
    expected = _eager_scores(eager, ids[names.INPUT_USER], ids[names.INPUT_ITEM])
    np.testing.assert_allclose(ens[names.OUTPUT_SCORE], expected, rtol=0, atol=1e-5)


def _brute_force_top_k(etl_dir, workflow, eager, raw_user: int, k: int):
    """Score every catalogue item with eager PyTorch, drop the user's train+test items, sort."""
    meta = _meta(etl_dir)
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw_items = np.sort(ratings[names.RAW_ITEM].unique())
    users, items = etl_fixture.transform(workflow, np.full(raw_items.size, raw_user), raw_items)
    user = int(users[0])
    seen = set(ratings.loc[ratings[names.RAW_USER] == raw_user, names.RAW_ITEM])
    lo, hi = meta["item_id_range"]
    assert sorted(items) == list(range(lo, hi))  # the catalogue is the item id range
    scores = _eager_scores(eager, np.full((items.size, 1), user), items.reshape(-1, 1))[:, 0]
    rows = sorted(
        (-s, code, raw)
        for s, code, raw in zip(scores, items, raw_items, strict=True)
        if raw not in seen
    )[:k]
    return np.array([r[2] for r in rows]), np.array([-r[0] for r in rows], dtype=np.float32)


@pytest.mark.parametrize("k", [1, 10])
def test_recommend_equals_brute_force(client, etl_dir, workflow, eager, k):
    """The k best unrated items of the eager network, best first. The served scores come from
    neumf_catalogue (same math, other float rounding): items whose eager scores are within 1e-6
    may swap places, so the check is on the scores and on each returned item's own score."""
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw_items = np.sort(ratings[names.RAW_ITEM].unique())
    for raw_user in np.random.default_rng(k).choice(ratings[names.RAW_USER].unique(), 3):
        out = infer(
            client,
            names.MODEL_RECOMMEND,
            {names.INPUT_RAW_USER: np.array([[raw_user]]), names.INPUT_K: np.array([[k]])},
            [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES],
        )
        got_items, got_scores = out[names.OUTPUT_RAW_ITEMS][0], out[names.OUTPUT_SCORES][0]
        want_items, want_scores = _brute_force_top_k(etl_dir, workflow, eager, int(raw_user), k)
        assert got_items.shape == (k,) and len(set(got_items.tolist())) == k
        np.testing.assert_allclose(got_scores, want_scores, rtol=0, atol=1e-6)
        # every returned item is a real, unrated item and carries its own eager score
        users, codes = etl_fixture.transform(workflow, np.full(k, raw_user), got_items)
        own = _eager_scores(eager, users.reshape(-1, 1), codes.reshape(-1, 1))[:, 0]
        np.testing.assert_allclose(got_scores, own, rtol=0, atol=1e-6)
        assert set(got_items.tolist()) <= set(raw_items.tolist())
        clear = np.abs(want_scores[:, None] - want_scores[None, :]) + np.eye(k) > 1e-6
        if clear.all():  # no near-ties among the top k: the order is the brute-force order
            np.testing.assert_array_equal(got_items, want_items)


def test_catalogue_scorer_equals_pytorch(client, etl_dir, eager):
    """neumf_catalogue: one user id -> every item's score, in model-id order."""
    lo, hi = _meta(etl_dir)["item_id_range"]
    items = np.arange(lo, hi).reshape(-1, 1)
    for user in (lo, hi // 2):
        user = min(user, _meta(etl_dir)["num_users"] - 1)
        out = infer(
            client,
            names.MODEL_CATALOGUE,
            {names.INPUT_USER: np.array([[user]], dtype=np.int64)},
            [names.OUTPUT_ITEM_SCORES],
        )[names.OUTPUT_ITEM_SCORES]
        want = _eager_scores(eager, np.full_like(items, user), items)[:, 0]
        assert out.shape == (1, hi - lo) and out.dtype == np.float32
        np.testing.assert_allclose(out[0], want, rtol=0, atol=1e-5)


def test_recommend_whole_catalogue_returns_only_unrated(client, etl_dir):
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw_user = int(ratings[names.RAW_USER].iloc[0])
    rated = set(ratings.loc[ratings[names.RAW_USER] == raw_user, names.RAW_ITEM])
    catalogue = ratings[names.RAW_ITEM].nunique()
    out = infer(
        client,
        names.MODEL_RECOMMEND,
        {names.INPUT_RAW_USER: np.array([[raw_user]]), names.INPUT_K: np.array([[catalogue]])},
        [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES],
    )
    got = out[names.OUTPUT_RAW_ITEMS][0]
    assert got.size == catalogue - len(rated) and not rated & set(got.tolist())
    assert np.all(np.diff(out[names.OUTPUT_SCORES][0]) <= 0)  # best first
