"""Fuzzed request bodies against a real tritonserver under a Supervisor: every answer is a 4xx
with a message naming what is wrong, or a result of the right shape; a body that aborts Triton
2.51 (a declared shape too large to allocate, docs/TRITON_IMAGE.md) is survived by a restart;
afterwards the server answers a valid request. Derandomized (tests/conftest.py), so the suite stays deterministic."""

from __future__ import annotations

import json
import math
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ncf.core import names
from ncf.serving.server import TritonServer
from ncf.serving.supervisor import RestartPolicy, Supervisor

pytestmark = [pytest.mark.triton, pytest.mark.slow]

HUGE = 2**63 - 1  # the shape dimension that aborts Triton 2.51's HTTP handler
INPUTS = {  # model -> its inputs (name, datatype); rows are [batch, 1] unless noted
    names.MODEL_NEUMF: [(names.INPUT_USER, "INT64"), (names.INPUT_ITEM, "INT64")],
    names.MODEL_ENSEMBLE: [(names.INPUT_RAW_USER, "INT64"), (names.INPUT_RAW_ITEM, "INT64")],
    names.MODEL_RECOMMEND: [(names.INPUT_RAW_USER, "INT64"), (names.INPUT_K, "INT64")],
}
# Triton 2.51's HTTP front end answers these client errors itself, before any model, with a 500
# (docs/TRITON_IMAGE.md, "Client errors")
TRITON_500 = ("failed to parse the request JSON buffer", "Unable to parse '")
ABORTS = 2**31  # a declared tensor of this many elements or more aborts Triton 2.51 (bad_alloc)
DTYPES = ["INT64", "INT32", "FP32", "FP64", "BOOL", "BYTES", "NOPE"]
DIMS = [0, 1, 2, 3, -1, 4097]  # at most 2 of them: no product reaches ABORTS


@pytest.fixture(scope="module")
def supervised(repo, tmp_path_factory) -> Iterator[tuple[TritonServer, Supervisor, list[str]]]:
    models = [names.MODEL_WORKFLOW, names.MODEL_NEUMF, names.MODEL_ENSEMBLE]
    models += [names.MODEL_CATALOGUE, names.MODEL_RECOMMEND]
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    logged: list[str] = []
    with TritonServer(repo, models=models, log_path=log) as server:
        yield (
            server,
            Supervisor(server, RestartPolicy(max_restarts=20, backoff_s=(0.2,)), logged.append),
            logged,
        )


def _body(model: str, shape: list[int]) -> tuple[str, bytes]:
    """(model, body): every input of ``model`` with ``shape`` and one data element."""
    inputs = [{"name": n, "shape": shape, "datatype": t, "data": [1]} for n, t in INPUTS[model]]
    return model, json.dumps({"inputs": inputs}).encode()


@st.composite
def tensor(draw, name: str, datatype: str) -> dict:
    """One input: mostly well-formed ([n, 1] INT64, n values), else any dtype, shape and size."""
    if draw(st.booleans()):
        rows = draw(st.integers(1, 4))
        data = draw(st.lists(st.integers(-2, 12), min_size=rows, max_size=rows))
        return {"name": name, "shape": [rows, 1], "datatype": datatype, "data": data}
    shape = draw(st.lists(st.sampled_from(DIMS), min_size=0, max_size=2))
    values = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=3))
    data = draw(st.lists(values, max_size=6))
    return {"name": name, "shape": shape, "datatype": draw(st.sampled_from(DTYPES)), "data": data}


@st.composite
def body(draw) -> tuple[str, bytes]:
    """(model, request body): the model's inputs, some left out, maybe an extra one, or garbage."""
    model = draw(st.sampled_from(sorted(INPUTS)))
    if draw(st.integers(0, 9)) == 0:
        return model, draw(st.binary(max_size=40))
    inputs = [draw(tensor(n, t)) for n, t in INPUTS[model] if draw(st.integers(0, 5))]
    if draw(st.integers(0, 5)) == 0:
        inputs.append(draw(tensor("no_such_input", "INT64")))
    return model, json.dumps({"inputs": inputs}).encode()


def _post(url: str, model: str, data: bytes) -> tuple[int, dict]:
    """(HTTP status, JSON answer); status 0: the connection dropped (the server died)."""
    req = urllib.request.Request(f"http://{url}/v2/models/{model}/infer", data=data)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def _sizes(data: bytes) -> list[int]:
    """The element count each input of a JSON body declares ([] for a body that is not JSON)."""
    try:
        return [math.prod(abs(d) for d in t["shape"]) for t in json.loads(data)["inputs"]]
    except (ValueError, KeyError, TypeError):
        return []


def _check_result(model: str, data: bytes, answer: dict) -> None:
    """A 200 answer holds each output with its declared shape, filled, and scores in [0, 1]."""
    rows = json.loads(data)["inputs"][0]["shape"][0]
    outputs = {o["name"]: o for o in answer["outputs"]}
    for out in outputs.values():
        assert out["shape"][0] == rows and len(out["data"]) == math.prod(out["shape"])
    if model != names.MODEL_RECOMMEND:
        assert all(0.0 <= s <= 1.0 for s in outputs[names.OUTPUT_SCORE]["data"])


@settings(
    max_examples=30,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: each example may cost a server restart
    suppress_health_check=list(HealthCheck),
)
@given(request=body())
@example(request=_body(names.MODEL_ENSEMBLE, [HUGE, 1]))  # std::length_error
@example(request=_body(names.MODEL_NEUMF, [65537, 65537]))  # std::bad_alloc
def test_fuzzed_request_bodies_get_a_client_error_or_a_result(supervised, request):
    server, supervisor, _ = supervised
    assert supervisor.check()  # up (restarted, if the last example aborted it)
    model, data = request
    status, answer = _post(server.http_url, model, data)
    if status == 0:  # Triton 2.51 itself aborts on a shape it cannot allocate
        assert max(_sizes(data), default=0) >= ABORTS, data
        deadline = time.monotonic() + 30
        while server.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.returncode == -signal.SIGABRT
        assert supervisor.check()
    elif status == 200:
        _check_result(model, data, answer)
    elif status == 500:
        assert answer.get("error", "").startswith(TRITON_500), (answer, data)
    else:
        assert 400 <= status < 500 and answer.get("error"), (status, answer, data)


def test_after_the_fuzzing_the_server_answers_a_valid_request(supervised):
    server, supervisor, logged = supervised
    assert supervisor.check()
    rows = [{"name": n, "shape": [1, 1], "datatype": t, "data": [1]} for n, t in INPUTS["ncf"]]
    status, answer = _post(server.http_url, "ncf", json.dumps({"inputs": rows}).encode())
    assert status == 200, (answer, logged)
