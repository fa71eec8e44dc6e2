"""`recommend` as a product uses it: cold start, exclusions, rated items on request, errors per
request inside one batch, and the two-stage (ANN) path, on the real tritonserver."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch
from tritonclient.utils import InferenceServerException

from ncf.cli import main
from ncf.core import names
from ncf.models.data import read_pairs
from ncf.serving.client import infer
from ncf.serving.recommend import movie_titles, movies_path
from ncf.serving.repository import latest_version
from tests.triton_repo import etl_fixture
from tests.triton_repo.test_serving import _brute_force_top_k, _eager_scores, _meta, check_row

pytestmark = pytest.mark.triton

OUTPUTS = [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES, names.OUTPUT_KNOWN]


def _ask(client, users, ks, **extra):
    inputs = {
        names.INPUT_RAW_USER: np.asarray(users, dtype=np.int64).reshape(-1, 1),
        names.INPUT_K: np.asarray(ks, dtype=np.int64).reshape(-1, 1),
        **extra,
    }
    return infer(client, names.MODEL_RECOMMEND, inputs, OUTPUTS)


def _popularity(etl_dir, workflow) -> np.ndarray:
    """Raw movieIds by number of training users, most first (ties: lower model id first)."""
    _, items = read_pairs(etl_dir / names.TRAIN_DIR)
    ratings = pd.read_csv(etl_fixture.RATINGS)
    raw = np.sort(ratings[names.RAW_ITEM].unique())
    _, codes = etl_fixture.transform(workflow, np.resize(ratings[names.RAW_USER], raw.size), raw)
    counts = np.bincount(items, minlength=codes.max() + 1)[codes]
    return raw[np.lexsort((codes, -counts))]


def test_unknown_users_get_the_popularity_ranking_beside_known_users(
    client, etl_dir, workflow, eager
):
    ratings = pd.read_csv(etl_fixture.RATINGS)
    known_user = int(ratings[names.RAW_USER].iloc[0])
    unknown = int(ratings[names.RAW_USER].max()) + 7
    popular = _popularity(etl_dir, workflow)
    exclude = np.array([[popular[1], -1], [popular[0], 10**9], [-1, -1]], dtype=np.int64)
    out = _ask(client, [unknown, unknown, known_user], [5, 3, 4], **{names.INPUT_EXCLUDE: exclude})
    assert out[names.OUTPUT_KNOWN][:, 0].tolist() == [False, False, True]
    items, scores = out[names.OUTPUT_RAW_ITEMS], out[names.OUTPUT_SCORES]
    np.testing.assert_array_equal(items[0], np.delete(popular, 1)[:5])  # -1 is padding
    np.testing.assert_array_equal(items[1, :3], np.delete(popular, 0)[:3])  # unknown id ignored
    assert np.all(np.diff(scores[0]) <= 0) and 0 < scores[0, 0] <= 1
    want = _brute_force_top_k(etl_dir, workflow, eager, known_user, 4)
    check_row(items[2, :4], scores[2, :4], *want, known_user, workflow, eager)


def _fold_args() -> tuple:
    """The cold start's settings in the repository's recommend config."""
    from tests.triton_repo.test_configs import config, params

    p = params(config(names.MODEL_RECOMMEND))
    return (int(p["foldin_steps"]), float(p["foldin_lr"]), float(p["foldin_l2"]),
            int(p["foldin_negatives"]))  # fmt: skip


def test_a_history_scores_an_unknown_user_with_the_folded_in_vectors(
    client, etl_dir, workflow, eager
):
    """Rows: unknown with a history (padded, one id outside the vocabulary), unknown with a
    history of unknown ids only (popularity), unknown without one (popularity)."""
    ratings = pd.read_csv(etl_fixture.RATINGS)
    unknown = int(ratings[names.RAW_USER].max()) + 7
    rated = ratings[names.RAW_ITEM].drop_duplicates().to_numpy()[[3, 40, 41]]
    history = np.array([[*rated, -1, 10**9], [10**9, -1, -1, -1, -1], [-1] * 5], dtype=np.int64)
    out = _ask(client, [unknown] * 3, [10, 5, 5], **{names.INPUT_HISTORY: history})
    assert not out[names.OUTPUT_KNOWN].any()
    popular = _popularity(etl_dir, workflow)
    for row in (1, 2):
        np.testing.assert_array_equal(out[names.OUTPUT_RAW_ITEMS][row, :5], popular[:5])
    _check_folded_row(out, 0, unknown, rated, etl_dir, workflow, eager, exact=True)


def test_exclude_and_include_rated_for_a_known_user(client, etl_dir, workflow, eager):
    ratings = pd.read_csv(etl_fixture.RATINGS)
    user = int(ratings[names.RAW_USER].iloc[0])
    first = _brute_force_top_k(etl_dir, workflow, eager, user, 3)[0]
    exclude = np.array([[first[0], first[2]]], dtype=np.int64)
    out = _ask(client, [user], [3], **{names.INPUT_EXCLUDE: exclude})
    want = _brute_force_top_k(etl_dir, workflow, eager, user, 3, exclude=first[[0, 2]])
    check_row(
        out[names.OUTPUT_RAW_ITEMS][0], out[names.OUTPUT_SCORES][0], *want, user, workflow, eager
    )
    flag = {names.INPUT_INCLUDE_RATED: np.array([[True]])}
    out = _ask(client, [user], [300], **flag)  # deep enough to reach some of the rated items
    want = _brute_force_top_k(etl_dir, workflow, eager, user, 300, include_rated=True)
    check_row(
        out[names.OUTPUT_RAW_ITEMS][0], out[names.OUTPUT_SCORES][0], *want, user, workflow, eager
    )
    rated = set(ratings.loc[ratings[names.RAW_USER] == user, names.RAW_ITEM])
    assert rated & set(out[names.OUTPUT_RAW_ITEMS][0].tolist())  # the test can tell


@contextmanager
def reloaded(server, model: str, **changes):
    """``model`` reloaded with a changed config (``parameters`` merged), the committed config
    reloaded afterwards."""
    import tritonclient.grpc as grpc

    with grpc.InferenceServerClient(server.grpc_url) as conn:
        config = conn.get_model_config(model, as_json=True)["config"]
        original = json.dumps(config)
        config = json.loads(original)
        for key, value in changes.pop("parameters", {}).items():
            config["parameters"][key] = {"string_value": str(value)}
        config.update(changes)
        conn.load_model(model, config=json.dumps(config))
        try:
            yield
        finally:  # explicitly: a load without a config keeps the override in force
            conn.load_model(model, config=original)


def _store(results: dict, key: int):
    return lambda result, error: results.__setitem__(key, (result, error))


def test_a_bad_request_in_a_batch_fails_alone(server):
    """Requests batched into one execute(): the bad ones get their own errors, the others their
    recommendations (the queue delay makes the batch whatever the machine's load)."""
    import tritonclient.grpc as grpc

    ratings = pd.read_csv(etl_fixture.RATINGS)
    user = int(ratings[names.RAW_USER].iloc[0])
    ks = [5, 0, 3, 10**6, 2, 5]
    results = {}
    delay = {"dynamic_batching": {"max_queue_delay_microseconds": 500_000}}
    with reloaded(server, names.MODEL_RECOMMEND, **delay):
        with grpc.InferenceServerClient(server.grpc_url) as conn:
            for key, k in enumerate(ks):
                tensors = []
                for name, value in ((names.INPUT_RAW_USER, user), (names.INPUT_K, k)):
                    tensors.append(grpc.InferInput(name, [1, 1], "INT64"))
                    tensors[-1].set_data_from_numpy(np.array([[value]], dtype=np.int64))
                conn.async_infer(names.MODEL_RECOMMEND, tensors, _store(results, key))
            deadline = time.monotonic() + 60
            while len(results) < len(ks) and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = conn.get_inference_statistics(names.MODEL_RECOMMEND, as_json=True)
    assert len(results) == len(ks)
    batches = stats["model_stats"][0]["batch_stats"]
    assert any(int(b["batch_size"]) > 1 for b in batches), "nothing was batched"
    for key, k in enumerate(ks):
        result, error = results[key]
        if k in (0, 10**6):
            assert result is None and f"k={k}: must be in [1, " in str(error)
        else:
            assert error is None and result.as_numpy(names.OUTPUT_RAW_ITEMS).shape == (1, k)


def test_bad_k_in_one_row_fails_the_request_with_its_value(client):
    with pytest.raises(InferenceServerException, match=r"k=0: must be in \[1, \d+\]"):
        _ask(client, [1, 1], [3, 0])


@pytest.mark.parametrize(("index", "n"), [("Flat", 0), ("HNSW32", 50), ("HNSW32", 400)])
def test_two_stage_path_reranks_candidates_with_the_network(
    server, client, etl_dir, workflow, eager, index, n
):
    """candidates ann: every answer is a ranked set of unrated items with their own NeuMF
    scores; with an exact index over every item it equals the exact path. efSearch 64 is below
    the neighbours wanted (n plus the user's rated items): recommend raises it for the search."""
    ratings = pd.read_csv(etl_fixture.RATINGS)
    users = [int(u) for u in ratings[names.RAW_USER].unique()[:3]]
    n = n or ratings[names.RAW_ITEM].nunique()
    params = {"candidates": "ann", "ann_index": index, "ann_candidates": n, "ann_ef_search": 64}
    unknown, rated = int(ratings[names.RAW_USER].max()) + 7, ratings[names.RAW_ITEM].to_numpy()[:4]
    history = np.full((4, 4), -1, dtype=np.int64)
    history[3] = rated  # the known users' rows: no history (it would be ignored)
    with reloaded(server, names.MODEL_RECOMMEND, parameters=params):
        out = _ask(client, [*users, unknown], [10] * 4, **{names.INPUT_HISTORY: history})
    _check_folded_row(out, 3, unknown, rated, etl_dir, workflow, eager, exact=index == "Flat")
    for row, user in enumerate(users):
        items, scores = out[names.OUTPUT_RAW_ITEMS][row], out[names.OUTPUT_SCORES][row]
        if index == "Flat":
            want = _brute_force_top_k(etl_dir, workflow, eager, user, 10)
            check_row(items, scores, *want, user, workflow, eager)
            continue
        rated = set(ratings.loc[ratings[names.RAW_USER] == user, names.RAW_ITEM])
        assert not rated & set(items.tolist()) and len(set(items.tolist())) == 10
        codes = etl_fixture.transform(workflow, np.full(10, user), items)
        own = _eager_scores(eager, codes[0].reshape(-1, 1), codes[1].reshape(-1, 1))[:, 0]
        np.testing.assert_allclose(scores, own, rtol=0, atol=1e-6)
        assert np.all(np.diff(scores) <= 0)


def _check_folded_row(out, row, user, rated, etl_dir, workflow, eager, exact: bool) -> None:
    """A cold user's row: each item's own fold-in score, best first, no history item; with every
    item a candidate, the fold-in's top 10 of the whole catalogue."""
    from ncf.serving.foldin import FoldIn

    meta, lo = _meta(etl_dir), _meta(etl_dir)["item_id_range"][0]
    codes = etl_fixture.transform(workflow, np.full(len(rated), user), rated)[1]
    fold = FoldIn(eager.model, meta["item_id_range"], meta["user_id_range"]).eval()
    want = fold(torch.from_numpy(codes), *_fold_args()).numpy()  # [C], by item id - lo
    want[codes - lo] = -np.inf
    items, scores = out[names.OUTPUT_RAW_ITEMS][row], out[names.OUTPUT_SCORES][row]
    got = etl_fixture.transform(workflow, np.full(len(items), user), items)[1]
    np.testing.assert_allclose(scores, want[got - lo], rtol=0, atol=1e-5)
    assert np.all(np.diff(scores) <= 0) and not set(items) & set(rated)
    if exact:
        np.testing.assert_allclose(scores, np.sort(want)[::-1][:10], rtol=0, atol=1e-5)


def test_ncf_recommend_prints_titles_for_known_and_unknown_users(server, repo, etl_dir, capsys):
    ratings = pd.read_csv(etl_fixture.RATINGS)
    user = int(ratings[names.RAW_USER].iloc[0])
    movies = etl_fixture.RATINGS.with_name("movies.csv")
    base = ["recommend", "--url", server.http_url, "--repo", str(repo), "--movies", str(movies)]
    assert main([*base, "--user", str(user), "--k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"user {user} (NeuMF") and len(lines) == 2 + 3
    served = _ask_http(server, user, 3)
    titles = pd.read_csv(movies).set_index(names.RAW_ITEM)["title"]
    for line, item in zip(lines[2:], served, strict=True):
        assert line.split()[1] == str(item) and line.endswith(titles[item])
    unknown = int(ratings[names.RAW_USER].max()) + 1
    assert main([*base, "--user", str(unknown), "--exclude", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "not in the training data: most popular" in out and len(out.splitlines()) == 12
    rated = [str(i) for i in ratings[names.RAW_ITEM].iloc[:3]]
    assert main([*base, "--user", str(unknown), "--k", "4", "--history", *rated]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "NeuMF from the 3 movies given" in out[0] and len(out) == 2 + 4
    assert not {line.split()[1] for line in out[2:]} & set(rated)  # the history is left out
    assert main([*base, "--user", str(user), "--k", "100000000"]) == 1
    assert "k=100000000: must be in" in capsys.readouterr().err


def _ask_http(server, user: int, k: int) -> list[int]:
    import tritonclient.http as http

    with http.InferenceServerClient(server.http_url) as conn:
        return _ask((http, conn), [user], [k])[names.OUTPUT_RAW_ITEMS][0].tolist()


def test_titles_come_from_movies_csv_beside_the_etl_input(tmp_path):
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "movies.csv").write_text("movieId,title,genres\n7,Seven (1995),Crime\n")
    meta = {"input": {"path": str(tmp_path / "ml" / "ratings.csv")}}
    (tmp_path / "etl").mkdir()
    (tmp_path / "etl" / names.METADATA_FILE).write_text(json.dumps(meta))
    path, _ = movies_path(None, str(tmp_path / "etl"), None)
    assert path == tmp_path / "ml" / "movies.csv" and movie_titles(path) == {7: "Seven (1995)"}
    assert movies_path(None, str(tmp_path / "missing"), None)[0] is None
    (tmp_path / "bad.csv").write_text("id,name\n1,x\n")
    with pytest.raises(ValueError, match="need columns movieId,title"):
        movie_titles(tmp_path / "bad.csv")


def _recommended(server, users: list[int], **params) -> np.ndarray:
    """Top-10 raw movieIds of ``users`` with ``recommend`` reloaded with ``params``."""
    import tritonclient.http as http

    with reloaded(server, names.MODEL_RECOMMEND, parameters=params):
        with http.InferenceServerClient(server.http_url) as conn:
            return _ask((http, conn), users, [10] * len(users))[names.OUTPUT_RAW_ITEMS]


def test_auto_serves_what_the_export_measured_for_these_settings(server, repo):
    """candidates auto: the manifest's checks.ann choice where it was measured with the config's
    own settings, the exact path where not (settings changed since, or the check chose exact)."""
    model_dir = repo / names.MODEL_RECOMMEND
    manifest_path = model_dir / str(latest_version(model_dir)) / names.MANIFEST_FILE
    original = manifest_path.read_text()
    check = json.loads(original)["checks"]["ann"]  # what the fixture's export measured
    assert check["serves"] in ("ann", "exact") and 0 <= check["recall@10"] <= 1
    assert check["users"] > 100 and check["settings"]["ann_candidates"] == "1000"
    users = [int(u) for u in pd.read_csv(etl_fixture.RATINGS)[names.RAW_USER].unique()[:8]]
    few = {"ann_index": "HNSW32", "ann_candidates": "10", "ann_ef_search": "16"}
    few["ann_min_recall"] = "0.99"
    exact = _recommended(server, users, candidates="exact")
    ann = _recommended(server, users, candidates="ann", **few)
    assert not np.array_equal(exact, ann)  # 10 candidates miss some of the exact top-10
    manifest = json.loads(original)
    try:
        manifest["checks"]["ann"] = {**check, "settings": few, "serves": "ann"}
        manifest_path.write_text(json.dumps(manifest))
        np.testing.assert_array_equal(_recommended(server, users, candidates="auto", **few), ann)
        other = {**few, "ann_candidates": "11"}  # not the settings the check measured
        np.testing.assert_array_equal(
            _recommended(server, users, candidates="auto", **other), exact
        )
        manifest["checks"]["ann"]["serves"] = "exact"
        manifest_path.write_text(json.dumps(manifest))
        np.testing.assert_array_equal(_recommended(server, users, candidates="auto", **few), exact)
    finally:
        manifest_path.write_text(original)


def test_exported_retrieval_module_is_a_copy_of_its_one_source(repo):
    """``ncf export`` copies serving/retrieval.py beside every python model.py (the recommend
    model imports it) and lists its sha256 in the manifest."""
    from ncf.core.digest import sha256_file
    from ncf.serving.repository import RETRIEVAL_SOURCE

    version = str(latest_version(repo / names.MODEL_RECOMMEND))
    python_models = [p.parent for p in repo.glob(f"*/{version}/model.py")]
    assert repo / names.MODEL_RECOMMEND / version in python_models
    for folder in python_models:
        copy = folder / RETRIEVAL_SOURCE.name
        assert copy.read_bytes() == RETRIEVAL_SOURCE.read_bytes()
        manifest = json.loads((folder / names.MANIFEST_FILE).read_text())
        assert manifest["helpers"][copy.name]["sha256"] == sha256_file(RETRIEVAL_SOURCE)
