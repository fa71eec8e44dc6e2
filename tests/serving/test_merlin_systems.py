"""`ncf export --with merlin-systems`: merlin-systems' executor ensemble of the same model and the
ETL's Workflow scores like ours, in this process and through a real tritonserver: with the
TorchScript model run inside the executor (`--merlin-predict python`, the default) on the bundled
server, and with PredictPyTorch's libtorch model (`--merlin-predict pytorch`) where the server has
the pytorch backend; where it has not (the bundled one: python backend only), the executor and
Workflow models load and the TorchScript step fails by name (docs/MERLIN_SYSTEMS.md)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ncf.bench import entry, triton
from ncf.cli import main
from ncf.core import names
from ncf.models.checkpoint import load_model
from ncf.models.data import read_metadata
from ncf.serving import export, merlin_systems
from ncf.serving.client import config_input_types
from ncf.serving.server import TritonServer
from ncf.serving.triton_env import backend_dir
from tests.triton_repo import etl_fixture

STEPS = ("0_transformworkflowtriton", "1_predictpytorchtriton")  # merlin-systems' own names


@pytest.fixture(scope="module")
def etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ratings = etl_fixture.synthetic_ratings(n_users=30, n_items=40, per_user=10, seed=5)
    # int32 raw ids, as `ncf etl` reads them: merlin_ncf then declares INT32 inputs, not INT64
    ratings = ratings.astype({names.RAW_USER: "int32", names.RAW_ITEM: "int32"})
    return etl_fixture.make_etl_dir(tmp_path_factory.mktemp("etl"), ratings)


@pytest.fixture(scope="module")
def checkpoint(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return etl_fixture.make_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", etl_dir)


def _export(checkpoint: Path, etl_dir: Path, out: Path, predict: str):
    manifest = export.export_repository(
        checkpoint,
        etl_dir,
        out / "repo",
        export_with=["merlin-systems"],
        merlin_repo=out / "ms",
        merlin_predict=predict,
    )
    return out / "ms", manifest


@pytest.fixture(scope="module")
def exported(checkpoint: Path, etl_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """``--merlin-predict python`` (the default): the TorchScript model inside the executor."""
    return _export(checkpoint, etl_dir, tmp_path_factory.mktemp("out"), "python")


@pytest.fixture(scope="module")
def exported_libtorch(checkpoint: Path, etl_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """``--merlin-predict pytorch``: merlin-systems' PredictPyTorch on the libtorch backend."""
    return _export(checkpoint, etl_dir, tmp_path_factory.mktemp("out"), "pytorch")


def test_the_export_writes_merlin_systems_models_and_checks_them(exported, exported_libtorch):
    repo, manifest = exported
    assert manifest["merlin_systems"] == str(repo.resolve())
    assert manifest["checks"]["max_abs_diff"]["merlin_systems"] <= 1e-5
    for model in (merlin_systems.MERLIN_MODEL, STEPS[0]):
        assert (repo / model / "config.pbtxt").is_file(), model
    assert not (repo / STEPS[1]).exists()  # run inside the executor model instead
    assert (
        repo / merlin_systems.MERLIN_MODEL / "1" / "ensemble" / "predict_torchscript.pt"
    ).is_file()
    repo, manifest = exported_libtorch
    assert manifest["checks"]["max_abs_diff"]["merlin_systems"] <= 1e-5
    for model in (merlin_systems.MERLIN_MODEL, *STEPS):
        assert (repo / model / "config.pbtxt").is_file(), model
    assert (repo / STEPS[1] / "1" / names.ARTIFACT_TORCHSCRIPT).is_file()


# Loads the executor's pickled graph with every import of this project refused, as a python
# stub without it would, and scores one batch of model ids through its TorchScript step.
_NO_NCF = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "ncf" or name.startswith("ncf."):
            raise ImportError(f"refused: {name}")
sys.meta_path.insert(0, Refuse())
import numpy as np
from merlin.dag import postorder_iter_nodes
from merlin.systems.dag import Ensemble
path = sys.argv[1]
ensemble = Ensemble.load(path)
ops = [n.op for n in postorder_iter_nodes(ensemble.graph.output_node, flatten_subgraphs=True)]
predict = [op for op in ops if type(op).__name__ == "PredictTorchScript"][0]
predict.load_artifacts(path)
import pandas as pd
out = predict.transform(None, pd.DataFrame({c: np.arange(3) for c in predict.input_schema.column_names}))
print(len(out), sorted(m for m in sys.modules if m.split(".")[0] == "ncf"))
"""


def test_the_served_graph_needs_nothing_of_this_project(exported):
    repo, _ = exported
    ensemble = repo / merlin_systems.MERLIN_MODEL / "1" / "ensemble"
    proc = subprocess.run(
        [sys.executable, "-c", _NO_NCF, str(ensemble)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "3 []", proc.stdout


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


def _infer(url: str, raw: dict, types: dict[str, str]) -> np.ndarray:
    import tritonclient.http as http

    conn = http.InferenceServerClient(url)
    inputs = []
    for column, values in raw.items():  # in the dtype the Workflow was fit on
        inputs.append(http.InferInput(column, [len(values)], types[column]))
        inputs[-1].set_data_from_numpy(values.astype(types[column].lower()))
    out = conn.infer(merlin_systems.MERLIN_MODEL, inputs).as_numpy(names.OUTPUT_SCORE)
    conn.close()
    return out.reshape(-1)


def _scores_match(server: TritonServer, checkpoint: Path, etl_dir: Path) -> None:
    model, _ = load_model(checkpoint, kinds=("neumf",))
    meta, _ = read_metadata(etl_dir)
    raw, users, items = merlin_systems.sample_pairs(etl_dir, meta, 32, seed=3)
    types = config_input_types(server.repo / merlin_systems.MERLIN_MODEL)
    with server:
        theirs = _infer(server.http_url, raw, types)
    with torch.no_grad():
        ours = model(torch.as_tensor(users), torch.as_tensor(items)).sigmoid().numpy()
    np.testing.assert_allclose(theirs, ours.reshape(-1), atol=1e-5, rtol=0)


@pytest.mark.triton
def test_served_by_a_real_tritonserver(exported, checkpoint, etl_dir):
    repo, _ = exported
    server = TritonServer(repo, models=[merlin_systems.MERLIN_MODEL, STEPS[0]])
    _scores_match(server, checkpoint, etl_dir)


@pytest.mark.triton
def test_served_on_the_pytorch_backend(exported_libtorch, checkpoint, etl_dir):
    repo, _ = exported_libtorch
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
    _scores_match(server, checkpoint, etl_dir)


@pytest.mark.triton
def test_the_triton_bench_measures_it_beside_ours(exported, tmp_path):
    repo, manifest = exported
    argv = ["--repo", str(repo.parent / "repo"), "--merlin-repo", str(repo), "--models", "ncf",
            "--protocols", "http", "--batch-sizes", "4", "--concurrency", "1", "--duration", "0.3",
            "--warmup", "0.1", "--results-dir", str(tmp_path), "--no-plot"]  # fmt: skip
    assert entry.main(triton, argv) == 0
    payload = json.loads((tmp_path / "triton.json").read_text())
    assert [r["model"] for r in payload["rows"]] == [names.MODEL_ENSEMBLE, names.MERLIN_MODEL]
    for r in payload["rows"]:
        assert r["errors"] == 0 and r["requests"] > 0 and r["batch"] == 4, r
        assert r["generator"].startswith("tritonclient") and r["server_compute_us"] > 0, r
    assert payload["merlin_repo"] == str(repo.resolve())


def test_the_triton_bench_refuses_a_folder_without_it(tmp_path, capsys):
    argv = ["--merlin-repo", str(tmp_path), "--results-dir", str(tmp_path), "--no-plot"]
    assert entry.main(triton, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--merlin-repo" in err and "--with merlin-systems" in err and "Traceback" not in err
