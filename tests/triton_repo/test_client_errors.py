"""A request that fails for what the client sent is the client's error: HTTP 400 and gRPC
INVALID_ARGUMENT, with a message naming the input (never a 500, a server fault)."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from ncf.core import names
from ncf.serving.client import infer
from tests.triton_repo.test_bad_requests import BAD, _ids

pytestmark = pytest.mark.triton

CLIENT_ERROR = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}

EXTRA = {  # cases beyond test_bad_requests' list: (model, inputs, a fragment of the message)
    "neumf_unknown_input": (
        names.MODEL_NEUMF,
        {**_ids(2), "no_such_input": np.ones((2, 1), np.int64)},
        "no_such_input",
    ),
}


@pytest.mark.parametrize("case", [*BAD, *EXTRA])
def test_client_errors_are_4xx_and_invalid_argument(client, case):
    model, inputs, fragment = {**BAD, **EXTRA}[case]
    module, _ = client
    protocol = "grpc" if "grpc" in module.__name__ else "http"
    with pytest.raises(InferenceServerException) as err:
        infer(client, model, inputs, [])
    assert err.value.status() == CLIENT_ERROR[protocol], f"{case}: {err.value}"
    assert fragment is None or fragment in err.value.message()
