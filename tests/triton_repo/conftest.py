"""Fixtures: an ETL dir with a real saved NVTabular Workflow (ml-latest-small), a random NeuMF
checkpoint, the repository `ncf export` makes of them, and one real tritonserver on it.

Until `ncf etl`/`ncf train` are used here, ``etl_fixture`` builds their outputs in the documented
formats. The server is session-scoped (startup ~4 s) and bound to free loopback ports.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ncf.models.checkpoint import load_model
from ncf.serving.client import connect
from ncf.serving.export import ServingNeuMF, export_repository
from ncf.serving.server import TritonServer
from tests.triton_repo import etl_fixture


@pytest.fixture(scope="session")
def etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return etl_fixture.make_etl_dir(tmp_path_factory.mktemp("etl"))


@pytest.fixture(scope="session")
def checkpoint(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return etl_fixture.make_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", etl_dir)


@pytest.fixture(scope="session")
def repo(checkpoint: Path, etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository exported from the fixtures (definitions copied from the project's)."""
    out = tmp_path_factory.mktemp("triton") / "repo"
    export_repository(checkpoint, etl_dir, out)
    return out


@pytest.fixture(scope="session")
def eager(checkpoint: Path) -> ServingNeuMF:
    """The checkpoint's network in eager PyTorch, as served ([B, 1] ids -> [B, 1] probability)."""
    model, _ = load_model(checkpoint)
    return ServingNeuMF(model).eval()


@pytest.fixture(scope="session")
def workflow(etl_dir: Path):
    """The saved NVTabular Workflow itself (the reference for the id mapping)."""
    return etl_fixture.load_workflow(etl_dir)


@pytest.fixture(scope="session")
def server(repo: Path) -> Iterator[TritonServer]:
    with TritonServer(repo) as srv:
        yield srv


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: TritonServer):
    """(tritonclient module, connected client) for each protocol; closed after the test."""
    module, conn = connect(request.param, getattr(server, f"{request.param}_url"))
    yield module, conn
    conn.close()
