"""serving/client.py without a server: request inputs, protocols, and ids drawn from a repository's
``workflow/1`` manifest and vocabulary (requests to a real server: tests/triton_repo)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ncf.core import names
from ncf.serving.client import IdPool, as_inputs, client_module, infer_inputs


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    vdir = tmp_path / names.MODEL_WORKFLOW / "1"
    vdir.mkdir(parents=True)
    ids = {"num_users": 6, "num_items": 9, "user_id_range": [1, 6], "item_id_range": [1, 9]}
    (vdir / names.MANIFEST_FILE).write_text(json.dumps({"ids": ids}))
    np.savez(vdir / names.ARTIFACT_VOCAB, user_raw=np.array([3, 8, 11]), item_raw=np.arange(5, 13))
    return tmp_path


def test_inputs_take_triton_dtypes_from_numpy() -> None:
    arrays = {"a": np.zeros((2, 1), np.int64), "b": np.zeros((2, 1), np.float32)}
    assert [(n, d) for n, _, d in as_inputs(arrays)] == [("a", "INT64"), ("b", "FP32")]
    triples = [("c", np.zeros((1, 1), np.int32), "INT64")]  # as given, even when inconsistent
    assert as_inputs(triples) == triples
    (tensor,) = infer_inputs(client_module("grpc"), {"u": np.arange(3).reshape(3, 1)})
    assert (tensor.name(), tensor.shape(), tensor.datatype()) == ("u", [3, 1], "INT64")


def test_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="protocol 'udp': use one of"):
        client_module("udp")


def test_id_pool_draws_valid_ids(repo: Path) -> None:
    pool = IdPool(repo)
    rng = np.random.default_rng(0)
    u, i = pool.model_ids(rng, 400, width=2)
    assert u.shape == i.shape == (400, 2) and u.dtype == np.int64
    assert set(np.unique(u)) == set(range(1, 6)) and set(np.unique(i)) == set(range(1, 9))
    raw_u, raw_i = pool.raw_ids(rng, 300)
    assert set(np.unique(raw_u)) == {3, 8, 11} and set(np.unique(raw_i)) == set(range(5, 13))
    user, k = pool.inputs(names.MODEL_RECOMMEND, 64, 7, rng)
    assert user[1].shape == (1, 1) and user[1][0, 0] in (3, 8, 11) and k[1].tolist() == [[7]]
    assert [n for n, _, _ in pool.inputs(names.MODEL_WORKFLOW, 4, 7, rng)] == [
        names.INPUT_RAW_USER,
        names.INPUT_RAW_ITEM,
    ]
    with pytest.raises(ValueError, match="model 'neumf_onnx': requests are built for"):
        pool.inputs(names.MODEL_NEUMF_ONNX, 1, 1, rng)


def test_id_pool_needs_an_exported_repository(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="manifest.json not found: run `ncf export"):
        IdPool(tmp_path)
