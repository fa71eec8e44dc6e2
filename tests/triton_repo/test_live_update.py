"""`ncf export --server-url` into the repository a running tritonserver serves: a new version
folder, loaded through Triton's model control while clients keep asking; no request fails and
every answer is one export's, never a mix."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ncf.core import names
from ncf.serving import repository
from ncf.serving.export import export_repository
from ncf.serving.server import TritonServer
from tests.triton_repo import etl_fixture

pytestmark = pytest.mark.triton

OUTPUTS = [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES, names.OUTPUT_EXPORT_ID]


def _ask(conn, users: np.ndarray) -> dict[str, np.ndarray]:
    import tritonclient.http as http

    tensors = []
    for name, array in ((names.INPUT_RAW_USER, users), (names.INPUT_K, np.full_like(users, 5))):
        tensors.append(http.InferInput(name, list(array.shape), "INT64"))
        tensors[-1].set_data_from_numpy(array)
    result = conn.infer(names.MODEL_RECOMMEND, tensors)
    return {o: result.as_numpy(o) for o in OUTPUTS}


class Load:
    """``threads`` clients asking for recommendations in a loop (bounded: one request in flight
    per client) until stopped; every answer and failure is kept."""

    def __init__(self, url: str, batches: list[np.ndarray], threads: int = 2):
        self.url, self.batches = url, batches
        self.answers: list[tuple[int, dict]] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(t,)) for t in range(threads)]

    def _run(self, offset: int) -> None:
        import tritonclient.http as http

        conn = http.InferenceServerClient(self.url)
        i = offset
        while not self._stop.is_set():
            batch = i % len(self.batches)
            try:
                self.answers.append((batch, _ask(conn, self.batches[batch])))
            except Exception as exc:  # noqa: BLE001 (every failure is the finding)
                self.failures.append(repr(exc))
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


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[o], b[o], equal_nan=True) for o in OUTPUTS)


def test_live_update_switches_with_no_failed_or_mixed_answer(etl_dir: Path, tmp_path: Path):
    old_ckpt = etl_fixture.make_checkpoint(tmp_path / "old.pt", etl_dir, seed=10)
    new_ckpt = etl_fixture.make_checkpoint(tmp_path / "new.pt", etl_dir, seed=11)
    repo = tmp_path / "repo"
    old_id = export_repository(old_ckpt, etl_dir, repo)["export_id"]
    raw = pd.read_csv(etl_fixture.RATINGS)[names.RAW_USER].unique()
    unknown = int(raw.max()) + 1  # cold start rows: the same items in both exports
    batches = [np.array([[raw[i]], [raw[i + 1]], [unknown]], dtype=np.int64) for i in (0, 2, 4)]
    with TritonServer(repo) as server:
        import tritonclient.http as http

        conn = http.InferenceServerClient(server.http_url)
        before = [_ask(conn, b) for b in batches]
        with Load(server.http_url, batches) as load:
            while len(load.answers) < 20:  # the load is under way before the export starts
                threading.Event().wait(0.05)
            manifest = export_repository(
                new_ckpt, etl_dir, repo, server_url=server.http_url, keep_versions=1
            )
            settled = len(load.answers)
            while len(load.answers) < settled + 20:  # and still after the switch
                threading.Event().wait(0.05)
        after = [_ask(conn, b) for b in batches]
        index = conn.get_model_repository_index()
        conn.close()
    assert load.failures == []
    new_id = manifest["export_id"]
    assert manifest["version"] == 2 and new_id != old_id
    for b in range(len(batches)):
        assert np.all(before[b][names.OUTPUT_EXPORT_ID] == old_id)
        assert np.all(after[b][names.OUTPUT_EXPORT_ID] == new_id)
        assert not np.array_equal(
            before[b][names.OUTPUT_RAW_ITEMS], after[b][names.OUTPUT_RAW_ITEMS]
        )
    seen_ids = set()
    for b, answer in load.answers:  # each answer is wholly the old export's or the new one's
        ids = set(answer[names.OUTPUT_EXPORT_ID].ravel().tolist())
        assert ids in ({old_id}, {new_id})
        assert _same(answer, before[b] if ids == {old_id} else after[b])
        seen_ids |= ids
    assert seen_ids == {old_id, new_id}, "the load did not span the switch"
    ready = {(e["name"], e.get("version")) for e in index if e.get("state") == "READY"}
    assert {m for m, _ in ready} == set(server.models) and {v for _, v in ready} == {"2"}
    for model in repository.MODEL_ARTIFACTS:  # the old version pruned once the new one served
        assert repository.versions(repo / model) == [2]
