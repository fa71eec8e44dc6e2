"""Bad requests get an error response (HTTP and gRPC), and the server keeps answering."""

from __future__ import annotations

import queue
import time
from functools import partial

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from ncf.core import names
from ncf.serving.client import infer, infer_inputs

pytestmark = pytest.mark.triton

MAX_BATCH = 65536  # neumf/workflow/ncf config.pbtxt (test_configs checks the configs agree)


def _ids(batch: int, user: int = 5, item: int = 7, dtype=np.int64, width: int = 1):
    return {
        names.INPUT_USER: np.full((batch, width), user, dtype=dtype),
        names.INPUT_ITEM: np.full((batch, width), item, dtype=dtype),
    }


def _raw(batch: int, dtype=np.int64):
    return {
        names.INPUT_RAW_USER: np.ones((batch, 1), dtype=dtype),
        names.INPUT_RAW_ITEM: np.ones((batch, 1), dtype=dtype),
    }


def _rec(user: int = 1, k: int = 10, k_shape=(1, 1)):
    return {
        names.INPUT_RAW_USER: np.array([[user]], dtype=np.int64),
        names.INPUT_K: np.full(k_shape, k, dtype=np.int64),
    }


# (model, inputs, a fragment the error message must contain; None: Triton's own wording)
BAD = {
    "neumf_wrong_dtype": (names.MODEL_NEUMF, _ids(4, dtype=np.int32), None),
    "neumf_float_ids": (names.MODEL_NEUMF, _ids(4, dtype=np.float32), None),
    "neumf_wrong_shape": (names.MODEL_NEUMF, _ids(4, width=2), None),
    "neumf_empty_batch": (names.MODEL_NEUMF, _ids(0), None),
    "neumf_user_out_of_range": (names.MODEL_NEUMF, _ids(4, user=10**6), "out of range"),
    "neumf_negative_item": (names.MODEL_NEUMF, _ids(4, item=-1), "item_id=-1"),
    "neumf_over_max_batch": (names.MODEL_NEUMF, _ids(MAX_BATCH + 1), None),
    "neumf_missing_input": (names.MODEL_NEUMF, {names.INPUT_USER: np.ones((2, 1), np.int64)}, None),
    "workflow_empty_batch": (names.MODEL_WORKFLOW, _raw(0), None),
    "ensemble_wrong_dtype": (names.MODEL_ENSEMBLE, _raw(4, dtype=np.float64), None),
    "ensemble_over_max_batch": (names.MODEL_ENSEMBLE, _raw(MAX_BATCH + 1), None),
    "catalogue_user_out_of_range": (
        names.MODEL_CATALOGUE,
        {names.INPUT_USER: np.array([[10**6]], dtype=np.int64)},
        "out of range",
    ),
    "catalogue_item_out_of_range": (
        names.MODEL_CATALOGUE,
        {
            names.INPUT_USER: np.array([[3]], dtype=np.int64),
            names.INPUT_ITEM_IDS: np.array([[10**6]], dtype=np.int64),
        },
        "item_ids",
    ),
    "recommend_k_zero": (names.MODEL_RECOMMEND, _rec(k=0), "k=0"),
    "recommend_k_negative": (names.MODEL_RECOMMEND, _rec(k=-3), "k=-3"),
    "recommend_k_over_catalogue": (names.MODEL_RECOMMEND, _rec(k=10**6), "catalogue"),
    "recommend_k_wrong_shape": (names.MODEL_RECOMMEND, _rec(k_shape=(1, 2)), None),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_is_rejected_and_server_keeps_answering(client, case):
    model, inputs, fragment = BAD[case]
    with pytest.raises(InferenceServerException) as err:
        infer(client, model, inputs, [])
    if fragment:
        assert fragment in str(err.value)
    good = infer(client, names.MODEL_NEUMF, _ids(3), [names.OUTPUT_SCORE])
    assert good[names.OUTPUT_SCORE].shape == (3, 1)


REQUEST_ROWS = 16
PER_BATCH = 4  # requests in each dynamic batch: one bad user id, three good ones
BAD_USER = 10**6  # out of range


@pytest.fixture(scope="module")  # one reload for every position: reloads are what take time
def exact_batcher(server):
    """The neumf model reloaded so that ``PER_BATCH`` requests sent together form one batch: a
    batch of the preferred size runs as soon as the queue holds one, and the queue delay, far
    longer than the test, holds fewer requests until then. The batches thus do not depend on how
    fast the machine sends the requests. The committed config is reloaded afterwards."""
    import json

    import tritonclient.grpc as grpc

    with grpc.InferenceServerClient(server.grpc_url) as conn:
        config = conn.get_model_config(names.MODEL_NEUMF, as_json=True)["config"]
        original = json.dumps(config)
        config["dynamic_batching"] = {
            "preferred_batch_size": [PER_BATCH * REQUEST_ROWS],
            "max_queue_delay_microseconds": 600_000_000,
        }
        conn.load_model(names.MODEL_NEUMF, config=json.dumps(config))
        try:
            yield
        finally:  # explicitly: a load without a config keeps the override in force
            conn.load_model(names.MODEL_NEUMF, config=original)


@pytest.mark.parametrize("bad_position", range(PER_BATCH))
def test_bad_request_in_a_dynamic_batch_fails_alone(server, exact_batcher, bad_position):
    """One batch of requests: the one with a bad id errors, the others get their scores.

    One batch at a time: while a batch waits for the model instance, Triton may add later requests
    to it beyond the preferred size, so a stream of requests would not batch exactly."""
    import tritonclient.grpc as grpc

    results: queue.Queue = queue.Queue()
    users = [5, 6, 7]
    users.insert(bad_position, BAD_USER)

    def executions(conn) -> int:
        # Every listed version (a reload may list more than one): the total is what moved.
        stats = conn.get_inference_statistics(names.MODEL_NEUMF, as_json=True)["model_stats"]
        return sum(int(s.get("execution_count", 0)) for s in stats)

    with grpc.InferenceServerClient(server.grpc_url) as conn:
        before = executions(conn)
        for key, user in enumerate(users):
            tensors = infer_inputs(grpc, _ids(REQUEST_ROWS, user=user))
            conn.async_infer(names.MODEL_NEUMF, tensors, partial(_put, results, key))
        answers = [results.get(timeout=120) for _ in users]
        # The server counts an execution once the model's execute returns, which may be after
        # the responses it sent have arrived here: wait for the count to move.
        deadline = time.monotonic() + 60
        while executions(conn) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert executions(conn) - before == 1, f"{len(users)} requests were not one batch"
    for key, result, error in answers:
        if users[key] == BAD_USER:
            assert result is None and "out of range" in str(error)
        else:
            assert error is None and result.as_numpy(names.OUTPUT_SCORE).shape == (REQUEST_ROWS, 1)


def _put(results: queue.Queue, key: int, result, error) -> None:
    results.put((key, result, error))
