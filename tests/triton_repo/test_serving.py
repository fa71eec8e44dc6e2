"""A real tritonserver answers like direct PyTorch and the saved NVTabular Workflow (HTTP and gRPC)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from ncf.core import names
from ncf.serving.client import infer
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


def _brute_force_top_k(
    etl_dir, workflow, eager, raw_user: int, k: int, exclude=(), include_rated=False
):
    """Score every catalogue item with eager PyTorch, drop the user's train+test items (unless
    ``include_rated``) and ``exclude``, sort."""
    meta = _meta(etl_dir)
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw_items = np.sort(ratings[names.RAW_ITEM].unique())
    users, items = etl_fixture.transform(workflow, np.full(raw_items.size, raw_user), raw_items)
    user = int(users[0])
    seen = (
        set()
        if include_rated
        else set(ratings.loc[ratings[names.RAW_USER] == raw_user, names.RAW_ITEM])
    )
    seen |= set(exclude)
    lo, hi = meta["item_id_range"]
    assert sorted(items) == list(range(lo, hi))  # the catalogue is the item id range
    scores = _eager_scores(eager, np.full((items.size, 1), user), items.reshape(-1, 1))[:, 0]
    rows = sorted(
        (-s, code, raw)
        for s, code, raw in zip(scores, items, raw_items, strict=True)
        if raw not in seen
    )[:k]
    return np.array([r[2] for r in rows]), np.array([-r[0] for r in rows], dtype=np.float32)


def _export_id(repo) -> int:
    manifest = repo / names.MODEL_RECOMMEND / "1" / names.MANIFEST_FILE
    return json.loads(manifest.read_text())["export_id"]


def check_row(got_items, got_scores, want_items, want_scores, raw_user, workflow, eager):
    """One user's served top-k against the brute force. The served scores come from
    neumf_catalogue (same math, other float rounding): items whose eager scores are within 1e-6
    may swap places, so the check is on the scores and on each returned item's own score."""
    k = len(want_items)
    assert got_items.shape == (k,) and len(set(got_items.tolist())) == k
    np.testing.assert_allclose(got_scores, want_scores, rtol=0, atol=1e-6)
    users, codes = etl_fixture.transform(workflow, np.full(k, raw_user), got_items)
    own = _eager_scores(eager, users.reshape(-1, 1), codes.reshape(-1, 1))[:, 0]
    np.testing.assert_allclose(got_scores, own, rtol=0, atol=1e-6)  # each item's own score
    clear = np.abs(want_scores[:, None] - want_scores[None, :]) + np.eye(k) > 1e-6
    if clear.all():  # no near-ties among the top k: the order is the brute-force order
        np.testing.assert_array_equal(got_items, want_items)


@pytest.mark.parametrize("k", [1, 10])
def test_recommend_equals_brute_force(client, etl_dir, workflow, eager, repo, k):
    """A batch of 3 users with different k in one request: each row is its user's k best
    unrated items, padded with -1 / NaN up to the largest k."""
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw_users = np.random.default_rng(k).choice(ratings[names.RAW_USER].unique(), 3)
    ks = np.array([k, 4, 1])
    out = infer(
        client,
        names.MODEL_RECOMMEND,
        {names.INPUT_RAW_USER: raw_users.reshape(-1, 1), names.INPUT_K: ks.reshape(-1, 1)},
        [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES, names.OUTPUT_KNOWN, names.OUTPUT_EXPORT_ID],
    )
    items, scores = out[names.OUTPUT_RAW_ITEMS], out[names.OUTPUT_SCORES]
    assert items.shape == scores.shape == (3, ks.max()) and scores.dtype == np.float32
    assert out[names.OUTPUT_KNOWN].tolist() == [[True]] * 3
    assert out[names.OUTPUT_EXPORT_ID].tolist() == [[_export_id(repo)]] * 3
    for row, (raw_user, kr) in enumerate(zip(raw_users, ks, strict=True)):
        want = _brute_force_top_k(etl_dir, workflow, eager, int(raw_user), int(kr))
        check_row(items[row, :kr], scores[row, :kr], *want, int(raw_user), workflow, eager)
        assert np.all(items[row, kr:] == -1) and np.all(np.isnan(scores[row, kr:]))


def test_catalogue_scorer_equals_pytorch(client, etl_dir, eager, repo):
    """neumf_catalogue: user ids [B, 1] -> every item's score [B, C] in model-id order, and
    item_ids [B, N] -> those items' scores; the export id on every row."""
    meta = _meta(etl_dir)
    lo, hi = meta["item_id_range"]
    items = np.arange(lo, hi).reshape(-1, 1)
    users = np.array([[lo], [min(hi // 2, meta["num_users"] - 1)]], dtype=np.int64)
    wanted = [names.OUTPUT_ITEM_SCORES, names.OUTPUT_EXPORT_ID]
    out = infer(client, names.MODEL_CATALOGUE, {names.INPUT_USER: users}, wanted)
    scores = out[names.OUTPUT_ITEM_SCORES]
    assert scores.shape == (2, hi - lo) and scores.dtype == np.float32
    assert out[names.OUTPUT_EXPORT_ID].tolist() == [[_export_id(repo)]] * 2
    for row, user in enumerate(users[:, 0]):
        want = _eager_scores(eager, np.full_like(items, user), items)[:, 0]
        np.testing.assert_allclose(scores[row], want, rtol=0, atol=1e-5)
    picked = np.array([[hi - 1, lo, lo + 5], [lo + 1, lo + 1, hi - 2]], dtype=np.int64)
    inputs = {names.INPUT_USER: users, names.INPUT_ITEM_IDS: picked}
    some = infer(client, names.MODEL_CATALOGUE, inputs, wanted)[names.OUTPUT_ITEM_SCORES]
    # Another matrix shape than the whole catalogue's: equal up to float rounding.
    np.testing.assert_allclose(some, np.take_along_axis(scores, picked - lo, axis=1), atol=1e-6)


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
    items, scores = out[names.OUTPUT_RAW_ITEMS][0], out[names.OUTPUT_SCORES][0]
    n = catalogue - len(rated)
    assert items.shape == (catalogue,) and not rated & set(items[:n].tolist())
    assert len(set(items[:n].tolist())) == n and np.all(items[n:] == -1)
    assert np.all(np.diff(scores[:n]) <= 0) and np.all(np.isnan(scores[n:]))  # best first
