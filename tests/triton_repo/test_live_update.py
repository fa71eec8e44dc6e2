"""`ncf export --server-url` into the repository a running tritonserver serves, two days on
loopback: day 2's export (``ncf etl --vocab-from`` day 1, so new users and items get ids after
day 1's) is loaded through Triton's model control while clients keep asking the ``ncf`` ensemble
and ``recommend``: no request fails, every answer is wholly one export's, never a mix, and only
the new version stays."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ncf.core import names
from ncf.serving import repository
from ncf.serving.export import export_repository
from ncf.serving.server import TritonServer
from ncf.workflows.etl import EtlConfig, run_etl
from tests.triton_repo import etl_fixture

pytestmark = pytest.mark.triton


def _infer(conn, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict:
    import tritonclient.http as http

    tensors = []
    for name, array in inputs.items():
        tensors.append(http.InferInput(name, list(array.shape), "INT64"))
        tensors[-1].set_data_from_numpy(array)
    result = conn.infer(model, tensors)
    return {o: result.as_numpy(o) for o in outputs}


class Load:
    """Clients each asking ``requests`` in turn in a loop (one in flight per client) until
    stopped; every answer (request index, outputs) and every failure is kept."""

    def __init__(self, url: str, requests: list[tuple], clients: int = 2):
        self.url, self.requests = url, requests
        self.answers: list[tuple[int, dict]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(c,)) for c in range(clients)]

    def _run(self, offset: int) -> None:
        import tritonclient.http as http

        conn = http.InferenceServerClient(self.url)
        i = offset
        while not self._stop.is_set():
            r = i % len(self.requests)
            try:
                self.answers.append((r, _infer(conn, *self.requests[r])))
            except Exception as exc:  # noqa: BLE001 (every failure is the finding)
                self.failures.append(f"{type(exc).__name__}: {exc}")
            i += 1
        conn.close()

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> dict:
    """ETL outputs of day 1 (ratings before the 80th-percentile time) and day 2 (all, numbered
    after day 1), a random checkpoint of each, and raw ids only day 2 knows."""
    root = tmp_path_factory.mktemp("days")
    ratings = pd.read_csv(etl_fixture.RATINGS)
    day1 = ratings[ratings.timestamp < ratings.timestamp.quantile(0.8)]
    day1.to_csv(root / "day1.csv", index=False)
    run_etl(EtlConfig(input=root / "day1.csv", out=root / "etl1"))
    run_etl(EtlConfig(input=etl_fixture.RATINGS, out=root / "etl2", vocab_from=root / "etl1"))
    new_users = np.setdiff1d(ratings.userId.unique(), day1.userId.unique())
    new_items = np.setdiff1d(ratings.movieId.unique(), day1.movieId.unique())
    return {
        "etl1": root / "etl1",
        "etl2": root / "etl2",
        "ckpt1": etl_fixture.make_checkpoint(root / "d1.pt", root / "etl1", seed=10),
        "ckpt2": etl_fixture.make_checkpoint(root / "d2.pt", root / "etl2", seed=11),
        "old_user": int(day1.userId.iloc[0]),
        "old_item": int(day1.movieId.iloc[0]),
        "new_user": int(new_users[0]),
        "new_item": int(new_items[0]),
    }


def _requests(days: dict) -> list[tuple]:
    """The ``ncf`` ensemble on every pairing of an old and a new user and item, and
    ``recommend`` for an old and a new user."""
    users = np.array([[days["old_user"]], [days["new_user"]]] * 2, dtype=np.int64)
    items = np.array([[days["old_item"]]] * 2 + [[days["new_item"]]] * 2, dtype=np.int64)
    scores = (names.MODEL_ENSEMBLE, {names.INPUT_RAW_USER: users, names.INPUT_RAW_ITEM: items},
              [names.OUTPUT_SCORE, names.OUTPUT_KNOWN])  # fmt: skip
    rec_users = np.array([[days["old_user"]], [days["new_user"]]], dtype=np.int64)
    rec = (names.MODEL_RECOMMEND, {names.INPUT_RAW_USER: rec_users, names.INPUT_K: np.full_like(rec_users, 5)},
           [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES, names.OUTPUT_EXPORT_ID])  # fmt: skip
    return [scores, rec]


def _wait_for(load: Load, answers: int, seconds: float = 120.0) -> None:
    """Until the load has ``answers`` answers; fails (not hangs) when requests keep failing."""
    deadline = time.monotonic() + seconds
    while len(load.answers) < answers:
        assert time.monotonic() < deadline, f"no answers: {load.failures[-3:]}"
        threading.Event().wait(0.05)


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[o], b[o], equal_nan=True) for o in a)


def test_day_two_switch_answers_each_request_from_one_export(days, tmp_path: Path, monkeypatch):
    import tritonclient.http as http

    # What the server serves right after the ensemble's switching load (the first wait): its
    # steps still serve both versions, or the old ensemble lost the version it calls.
    served: list[dict[str, set[int]]] = []
    wait = repository._wait_unloaded

    def snapshot_then_wait(client, *args):
        if not served:
            served.append(repository._ready_versions(client))
        return wait(client, *args)

    monkeypatch.setattr(repository, "_wait_unloaded", snapshot_then_wait)
    repo = tmp_path / "repo"
    old_id = export_repository(days["ckpt1"], days["etl1"], repo)["export_id"]
    requests = _requests(days)
    with TritonServer(repo) as server:
        conn = http.InferenceServerClient(server.http_url)
        before = [_infer(conn, *r) for r in requests]
        with Load(server.http_url, requests) as load:
            _wait_for(load, 20)  # the load is under way before the export starts
            manifest = export_repository(
                days["ckpt2"], days["etl2"], repo, server_url=server.http_url, keep_versions=1
            )
            _wait_for(load, len(load.answers) + 20)  # and still after the switch
        after = [_infer(conn, *r) for r in requests]
        index = conn.get_model_repository_index()
        conn.close()
    steps = {names.MODEL_WORKFLOW, names.MODEL_NEUMF}
    assert {m: served[0][m] for m in steps} == {m: {1, 2} for m in steps}
    assert not load.failures, (
        f"{len(load.failures)} requests failed: {sorted(set(load.failures))[:5]}"
    )
    new_id = manifest["export_id"]
    assert manifest["version"] == 2 and new_id != old_id
    assert np.all(before[1][names.OUTPUT_EXPORT_ID] == old_id)
    assert np.all(after[1][names.OUTPUT_EXPORT_ID] == new_id)
    # Day 1 knows neither new id; day 2 knows both, under ids after day 1's.
    assert before[0][names.OUTPUT_KNOWN].ravel().tolist() == [True, False, False, False]
    assert after[0][names.OUTPUT_KNOWN].all()
    for r in range(len(requests)):
        assert not _same(before[r], after[r])
    mixed = [(r, a) for r, a in load.answers if not (_same(a, before[r]) or _same(a, after[r]))]
    assert not mixed, f"{len(mixed)} answers pair the two exports' artifacts: {mixed[:2]}"
    seen = {r: {_same(a, after[r]) for rr, a in load.answers if rr == r} for r in range(2)}
    assert seen == {0: {False, True}, 1: {False, True}}, "the load did not span the switch"
    ready = {(e["name"], e.get("version")) for e in index if e.get("state") == "READY"}
    assert {m for m, _ in ready} == set(server.models) and {v for _, v in ready} == {"2"}
    for model in repository.MODEL_ARTIFACTS:  # the old version pruned once the new one served
        assert repository.versions(repo / model) == [2]


def test_a_refused_switch_is_one_line_and_the_old_export_keeps_answering(
    days, tmp_path: Path, monkeypatch, capsys
):
    import tritonclient.http as http

    from ncf.cli import main

    repo = tmp_path / "repo"
    export_repository(days["ckpt1"], days["etl1"], repo)
    write = repository.write_repository

    def write_then_break(folder, *args):  # day 2's workflow cannot load: its vocabulary is gone
        write(folder, *args)
        vocab = Path(folder) / names.MODEL_WORKFLOW / "2" / names.ARTIFACT_VOCAB
        vocab.unlink()  # not truncated: the file is a hard link shared with recommend's
        vocab.write_bytes(b"not an npz")

    monkeypatch.setattr(repository, "write_repository", write_then_break)
    requests = _requests(days)
    args = ["export", "--checkpoint", str(days["ckpt2"]), "--data", str(days["etl2"])]
    with TritonServer(repo) as server:
        conn = http.InferenceServerClient(server.http_url)
        before = [_infer(conn, *r) for r in requests]
        rc = main([*args, "--repo", str(repo), "--server-url", server.http_url])
        after = [_infer(conn, *r) for r in requests]
        conn.close()
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert rc == 1 and len(errors) == 1, errors
    assert f"switching {server.http_url} to version 2 failed" in errors[0], errors
    assert all(_same(b, a) for b, a in zip(before, after, strict=True))
    for model in repository.MODEL_ARTIFACTS:  # nothing pruned, the new version kept to look at
        assert repository.versions(repo / model) == [1, 2]
