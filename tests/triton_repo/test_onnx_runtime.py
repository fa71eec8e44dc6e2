"""The `neumf` python model with runtime=onnx (ONNX Runtime inside Triton) equals eager PyTorch."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from ncf.core import names
from ncf.serving.client import infer
from ncf.serving.server import TritonServer

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def onnx_server(repo, tmp_path_factory):
    copy = shutil.copytree(repo, tmp_path_factory.mktemp("onnx") / "repo")
    config = copy / names.MODEL_NEUMF / "config.pbtxt"
    text = config.read_text()
    assert 'string_value: "torchscript"' in text
    config.write_text(text.replace('string_value: "torchscript"', 'string_value: "onnx"', 1))
    # The ONNX artifact alone: a server that silently fell back to TorchScript would fail to load.
    (copy / names.MODEL_NEUMF / "1" / names.ARTIFACT_TORCHSCRIPT).unlink()
    with TritonServer(copy, models=[names.MODEL_NEUMF]) as server:
        yield server


@pytest.mark.parametrize("batch", [1, 1024])
def test_onnx_runtime_equals_pytorch(onnx_server, etl_dir, eager, batch):
    import tritonclient.http as http

    meta = json.loads((etl_dir / names.METADATA_FILE).read_text())
    rng = np.random.default_rng(batch)
    users = rng.integers(*meta["user_id_range"], size=(batch, 1))
    items = rng.integers(*meta["item_id_range"], size=(batch, 1))
    with http.InferenceServerClient(onnx_server.http_url) as conn:
        ids = {names.INPUT_USER: users, names.INPUT_ITEM: items}
        out = infer((http, conn), names.MODEL_NEUMF, ids, [names.OUTPUT_SCORE])
    with torch.no_grad():
        want = eager(torch.tensor(users), torch.tensor(items)).numpy()
    assert out[names.OUTPUT_SCORE].shape == (batch, 1)
    np.testing.assert_allclose(out[names.OUTPUT_SCORE], want, rtol=0, atol=1e-5)
