"""`ncf export --with merlin-systems`: merlin-systems' executor ensemble of the same model and the
ETL's Workflow scores like ours, in this process and through a real tritonserver where that
server has the pytorch backend; where it has not (the bundled one: python backend only), the
executor and Workflow models load and the TorchScript step fails by name (docs/MERLIN_SYSTEMS.md)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from ncf.cli import main
from ncf.core import names
from ncf.models.checkpoint import load_model
from ncf.models.data import read_metadata
from ncf.serving import export, merlin_systems
from ncf.serving.server import TritonServer
from ncf.serving.triton_env import backend_dir
from tests.triton_repo import etl_fixture

STEPS = ("0_transformworkflowtriton", "1_predictpytorchtriton")  # merlin-systems' own names


@pytest.fixture(scope="module")
def etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ratings = etl_fixture.synthetic_ratings(n_users=30, n_items=40, per_user=10, seed=5)
    return etl_fixture.make_etl_dir(tmp_path_factory.mktemp("etl"), ratings)


@pytest.fixture(scope="module")
def checkpoint(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return etl_fixture.make_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", etl_dir)


@pytest.fixture(scope="module")
def exported(checkpoint: Path, etl_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("out")
    manifest = export.export_repository(
        checkpoint, etl_dir, out / "repo", export_with=["merlin-systems"], merlin_repo=out / "ms"
    )
    return out / "ms", manifest


def test_the_export_writes_merlin_systems_models_and_checks_them(exported):
    repo, manifest = exported
    assert manifest["merlin_systems"] == str(repo.resolve())
    assert manifest["checks"]["max_abs_diff"]["merlin_systems"] <= 1e-5
    for model in (merlin_systems.MERLIN_MODEL, *STEPS):
        assert (repo / model / "config.pbtxt").is_file(), model
    assert (repo / STEPS[1] / "1" / names.ARTIFACT_TORCHSCRIPT).is_file()


def test_the_check_tells_another_model_apart(checkpoint, etl_dir):
    model, _ = load_model(checkpoint, kinds=("neumf",))
    meta, _ = read_metadata(etl_dir)
    ensemble = merlin_systems.build_ensemble(copy.deepcopy(model), etl_dir)  # own weights
    pairs = merlin_systems.sample_pairs(etl_dir, meta, 64, seed=2)
    assert merlin_systems.check_in_process(ensemble, model, *pairs) <= 1e-6
    with torch.no_grad():
        model.final.bias += 1.0  # another model: the same check must see it
    assert merlin_systems.check_in_process(ensemble, model, *pairs) > 1e-3


def test_a_folder_it_did_not_write_is_refused(checkpoint, etl_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("a user's file")
    argv = ["export", "--checkpoint", str(checkpoint), "--data", str(etl_dir), "--repo",
            str(tmp_path / "repo"), "--with", "merlin-systems", "--merlin-repo", str(mine)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the config line
    assert "--merlin-repo" in err and "not written by" in err and "Traceback" not in err, err
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]
    assert not (tmp_path / "repo").exists()  # refused before anything was written


def _infer(url: str, raw: dict) -> np.ndarray:
    import tritonclient.http as http

    conn = http.InferenceServerClient(url)
    inputs = []
    for column, values in raw.items():
        inputs.append(http.InferInput(column, [len(values)], "INT64"))
        inputs[-1].set_data_from_numpy(values.astype(np.int64))
    out = conn.infer(merlin_systems.MERLIN_MODEL, inputs).as_numpy(names.OUTPUT_SCORE)
    conn.close()
    return out.reshape(-1)


def test_served_by_a_real_tritonserver(exported, checkpoint, etl_dir):
    repo, _ = exported
    server = TritonServer(repo, models=[merlin_systems.MERLIN_MODEL, *STEPS])
    if not (backend_dir() / "pytorch").is_dir():  # the bundled server: python backend only
        with pytest.raises(RuntimeError):
            server.start(timeout=120)
        log = server.log_tail(200)
        server.stop()
        assert "unable to find backend library for backend 'pytorch'" in log, log
        for model in (merlin_systems.MERLIN_MODEL, STEPS[0]):
            assert f"successfully loaded '{model}'" in log, log
        return
    model, _ = load_model(checkpoint, kinds=("neumf",))
    meta, _ = read_metadata(etl_dir)
    raw, users, items = merlin_systems.sample_pairs(etl_dir, meta, 32, seed=3)
    with server:
        theirs = _infer(server.http_url, raw)
    with torch.no_grad():
        ours = model(torch.as_tensor(users), torch.as_tensor(items)).sigmoid().numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
