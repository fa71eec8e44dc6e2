"""Triton clients: connections, requests and valid ids, shared by the load generator, the
benchmarks and the tests.

A request's inputs are ``(input name, array, Triton dtype)`` triples (``Inputs``), or a mapping of
name to array whose Triton dtypes follow the numpy dtypes. A connection is the pair
``(tritonclient module, client)`` that ``connect`` returns, so that one function sends a request
over HTTP or gRPC alike. ``IdPool`` draws valid ids from an exported repository.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ncf.core import names, textfile
from ncf.serving.repository import latest_version

Inputs = list[tuple[str, np.ndarray, str]]  # (Triton input name, array, Triton dtype)
Connection = tuple[ModuleType, Any]  # (tritonclient.http or .grpc, its InferenceServerClient)
PROTOCOLS = ("http", "grpc")


def client_module(protocol: str) -> ModuleType:
    """``tritonclient.http`` or ``tritonclient.grpc`` for ``protocol`` ("http" or "grpc")."""
    if protocol == "http":
        import tritonclient.http as module
    elif protocol == "grpc":
        import tritonclient.grpc as module
    else:
        raise ValueError(f"protocol {protocol!r}: use one of {PROTOCOLS}")
    return module


def connect(protocol: str, url: str) -> Connection:
    """A new client of the server at ``url`` (``host:port``); close it with ``conn[1].close()``."""
    module = client_module(protocol)
    return module, module.InferenceServerClient(url)


def as_inputs(inputs: Inputs | Mapping[str, np.ndarray]) -> Inputs:
    """Triples as they are; a mapping gets the Triton dtype of each array's numpy dtype."""
    if not isinstance(inputs, Mapping):
        return list(inputs)
    from tritonclient.utils import np_to_triton_dtype

    return [(name, a, np_to_triton_dtype(a.dtype)) for name, a in inputs.items()]


def config_input_types(model_dir: str | os.PathLike) -> dict[str, str]:
    """Input name -> Triton datatype (``"INT32"``, ...) that ``model_dir/config.pbtxt`` declares."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = text_format.Parse((Path(model_dir) / "config.pbtxt").read_text(), pb.ModelConfig())
    return {i.name: pb.DataType.Name(i.data_type).removeprefix("TYPE_") for i in config.input}


def cast_inputs(inputs: Inputs, types: Mapping[str, str]) -> Inputs:
    """``inputs`` with each array cast to the Triton datatype ``types`` names for it (others kept)."""
    out = []
    for name, array, dtype in inputs:
        dtype = types.get(name, dtype)
        out.append((name, array.astype(np.dtype(dtype.lower()), copy=False), dtype))
    return out


def infer_inputs(module: ModuleType, inputs: Inputs | Mapping[str, np.ndarray]) -> list:
    """``module.InferInput`` tensors holding ``inputs`` (built once, reusable across requests)."""
    tensors = []
    for name, array, dtype in as_inputs(inputs):
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def infer(
    conn: Connection,
    model: str,
    inputs: Inputs | Mapping[str, np.ndarray],
    outputs: Sequence[str],
) -> dict[str, np.ndarray]:
    """Send one request to ``model`` and return the named ``outputs`` as arrays.

    Parameters
    ----------
    conn
        ``(module, client)`` as ``connect`` returns it.
    inputs
        Triples, or a name -> array mapping (see ``as_inputs``).
    outputs
        Output names to request and return.

    Raises
    ------
    tritonclient.utils.InferenceServerException
        The server rejected the request (or, over gRPC, the transport failed).
    """
    module, client = conn
    requested = [module.InferRequestedOutput(o) for o in outputs]
    result = client.infer(model, infer_inputs(module, inputs), outputs=requested)
    return {o: result.as_numpy(o) for o in outputs}


class IdPool:
    """Valid ids of an exported repository: model-id ranges and raw-id vocabularies.

    Read from the newest ``workflow/<version>/`` (``manifest.json`` "ids" and ``vocab.npz``), as
    ``ncf export`` writes them. ``users`` and ``items`` are ``[lo, hi)`` model-id ranges.
    """

    def __init__(self, repo: str | Path):
        model_dir = Path(repo) / names.MODEL_WORKFLOW
        vdir = model_dir / str(latest_version(model_dir) or 1)
        manifest = vdir / names.MANIFEST_FILE
        if not manifest.is_file():
            raise FileNotFoundError(
                f"{manifest} not found: run `ncf export ... --repo {repo}` first"
            )
        ids = textfile.read_json(manifest)["ids"]
        self.users, self.items = tuple(ids["user_id_range"]), tuple(ids["item_id_range"])
        self.num_users, self.num_items = int(ids["num_users"]), int(ids["num_items"])
        with np.load(vdir / names.ARTIFACT_VOCAB) as z:
            self.raw_users, self.raw_items = z["user_raw"], z["item_raw"]

    def model_ids(
        self, rng: np.random.Generator, batch: int, width: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Random valid (user, item) model ids, int64 ``[batch, width]`` each."""
        u = rng.integers(*self.users, size=(batch, width), dtype=np.int64)
        i = rng.integers(*self.items, size=(batch, width), dtype=np.int64)
        return u, i

    def raw_ids(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Random known (userId, movieId) raw ids, int64 ``[batch, 1]`` each."""
        u = rng.choice(self.raw_users, size=(batch, 1)).astype(np.int64)
        i = rng.choice(self.raw_items, size=(batch, 1)).astype(np.int64)
        return u, i

    @staticmethod
    def recommend_inputs(raw_user: int, k: int) -> Inputs:
        """``recommend``'s inputs: one raw userId and ``k``, int64 ``[1, 1]`` each."""
        return [
            (names.INPUT_RAW_USER, np.array([[raw_user]], dtype=np.int64), "INT64"),
            (names.INPUT_K, np.array([[k]], dtype=np.int64), "INT64"),
        ]

    def inputs(self, model: str, batch: int, k: int, rng: np.random.Generator) -> Inputs:
        """One valid request's inputs for ``model``: ``neumf`` takes model ids, ``workflow`` and
        the ``ncf`` ensemble raw ids ``[batch, 1]``, merlin-systems' ``merlin_ncf`` raw ids
        ``[batch]``, ``recommend`` one raw user (``batch`` is ignored)."""
        if model == names.MODEL_NEUMF:
            u, i = self.model_ids(rng, batch)
            return [(names.INPUT_USER, u, "INT64"), (names.INPUT_ITEM, i, "INT64")]
        if model in (names.MODEL_ENSEMBLE, names.MODEL_WORKFLOW):
            u, i = self.raw_ids(rng, batch)
            return [(names.INPUT_RAW_USER, u, "INT64"), (names.INPUT_RAW_ITEM, i, "INT64")]
        if model == names.MODEL_RECOMMEND:
            return self.recommend_inputs(int(rng.choice(self.raw_users)), k)
        if model == names.MERLIN_MODEL:  # merlin-systems' executor model: raw ids [B]
            u, i = self.raw_ids(rng, batch)
            return [(names.RAW_USER, u[:, 0], "INT64"), (names.RAW_ITEM, i[:, 0], "INT64")]
        raise ValueError(
            f"model {model!r}: requests are built for {names.MODEL_NEUMF}, {names.MODEL_WORKFLOW},"
            f" {names.MODEL_ENSEMBLE}, {names.MODEL_RECOMMEND} and {names.MERLIN_MODEL}"
        )
