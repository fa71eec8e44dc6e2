"""`ncf export`: artifacts equal eager PyTorch, manifest, ETL tables, version folders, bad inputs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
import torch

from ncf.cli import main
from ncf.core import names
from ncf.models.checkpoint import load_model
from ncf.models.data import read_metadata
from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving import export, repository, tables
from ncf.serving.repository import MODEL_ARTIFACTS
from ncf.serving.triton_env import free_port
from tests.triton_repo import etl_fixture


@pytest.fixture(scope="module")
def etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ratings = etl_fixture.synthetic_ratings(n_users=40, n_items=60, per_user=12, seed=3)
    return etl_fixture.make_etl_dir(tmp_path_factory.mktemp("etl"), ratings)


@pytest.fixture(scope="module")
def checkpoint(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return etl_fixture.make_checkpoint(tmp_path_factory.mktemp("run") / "best.pt", etl_dir)


@pytest.fixture(scope="module")
def exported(checkpoint: Path, etl_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("out") / "repo"
    return repo, export.export_repository(checkpoint, etl_dir, repo)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): _sha(p) for p in sorted(repo.rglob("*")) if p.is_file()}


def test_every_model_gets_its_artifacts_and_a_manifest(exported, checkpoint, etl_dir):
    repo, common = exported
    meta = json.loads((etl_dir / names.METADATA_FILE).read_text())
    for model, artifacts in MODEL_ARTIFACTS.items():
        vdir = repo / model / "1"
        manifest = json.loads((vdir / names.MANIFEST_FILE).read_text())
        assert manifest["model"] == model and (repo / model / "config.pbtxt").is_file()
        assert set(manifest["artifacts"]) == set(artifacts)
        for name, entry in manifest["artifacts"].items():
            assert entry == {"sha256": _sha(vdir / name), "bytes": (vdir / name).stat().st_size}
        assert manifest["ids"] == {k: meta[k] for k in manifest["ids"]}
        assert manifest["source"]["checkpoint_sha256"] == _sha(checkpoint)
        assert manifest["source"]["metadata_sha256"] == _sha(etl_dir / names.METADATA_FILE)
        assert manifest["version"] == 1 and manifest["export_id"] == common["export_id"] > 0
    diffs = common["checks"]["max_abs_diff"]
    assert (
        set(diffs) == {"torchscript", "onnx", "catalogue", "foldin"} and max(diffs.values()) <= 1e-5
    )
    bf16 = common["checks"]["catalogue_bf16"]
    assert 0 <= bf16["max_abs_diff"] < 0.05 and 0.5 <= bf16["top10_agreement"] <= 1
    assert (repo / names.MODEL_NEUMF / "1" / "model.py").is_file()  # definitions copied in
    helper = repository.project_repo() / names.PYTHON_MODEL_HELPER
    with_model_py = {p.parent.parent.name for p in repo.glob("*/1/model.py")}
    assert with_model_py == {
        m for m in MODEL_ARTIFACTS if (helper.parent / m / "1" / "model.py").is_file()
    }
    for model in with_model_py:  # the one shared helper beside every python model, in its manifest
        assert (repo / model / "1" / helper.name).read_bytes() == helper.read_bytes()
        manifest = json.loads((repo / model / "1" / names.MANIFEST_FILE).read_text())
        assert manifest["helpers"][helper.name]["sha256"] == _sha(helper)
    assert not list(repo.glob(".tmp-*")) and not list(repo.glob("*/.tmp-*"))


@pytest.mark.parametrize("batch", [1, 333])
def test_written_artifacts_equal_eager_pytorch(exported, checkpoint, etl_dir, batch):
    repo, _ = exported
    meta = json.loads((etl_dir / names.METADATA_FILE).read_text())
    model, _ = load_model(checkpoint)
    users, items = export.random_ids(meta, batch, seed=batch)
    with torch.no_grad():
        want = torch.sigmoid(model(users[:, 0], items[:, 0])).numpy()[:, None]
        ts = torch.jit.load(repo / names.MODEL_NEUMF_LIBTORCH / "1" / names.ARTIFACT_TORCHSCRIPT)
        got_ts = ts(users, items).numpy()
    session = ort.InferenceSession(
        str(repo / names.MODEL_NEUMF_ONNX / "1" / names.ARTIFACT_ONNX),
        providers=["CPUExecutionProvider"],
    )
    feed = {names.INPUT_USER: users.numpy(), names.INPUT_ITEM: items.numpy()}
    got_onnx = session.run([names.OUTPUT_SCORE], feed)[0]
    for got in (got_ts, got_onnx):
        assert got.shape == (batch, 1) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_written_catalogue_scorer_equals_eager_pytorch(exported, checkpoint, etl_dir):
    repo, _ = exported
    meta = json.loads((etl_dir / names.METADATA_FILE).read_text())
    lo, hi = meta["item_id_range"]
    model, _ = load_model(checkpoint)
    scorer = torch.jit.load(repo / names.MODEL_CATALOGUE_LIBTORCH / "1" / names.ARTIFACT_CATALOGUE)
    assert [a.name for a in scorer.forward.schema.arguments[1:]] == [names.INPUT_USER]
    items = torch.arange(lo, hi)
    users = export.random_ids(meta, 3, seed=7)[0]
    with torch.no_grad():
        got, ids = scorer(users)
    assert got.shape == (3, hi - lo) and ids.tolist() == [[exported[1]["export_id"]]] * 3
    for row, user in enumerate(users[:, 0].tolist()):
        with torch.no_grad():
            want = torch.sigmoid(model(torch.full_like(items, user), items))
        torch.testing.assert_close(got[row], want, rtol=0, atol=1e-5)


def test_artifacts_carry_the_triton_tensor_names(exported):
    repo, _ = exported
    ts = torch.jit.load(repo / names.MODEL_NEUMF / "1" / names.ARTIFACT_TORCHSCRIPT)
    assert [a.name for a in ts.forward.schema.arguments[1:]] == [names.INPUT_USER, names.INPUT_ITEM]
    graph = onnx.load(repo / names.MODEL_NEUMF / "1" / names.ARTIFACT_ONNX).graph
    assert [i.name for i in graph.input] == [names.INPUT_USER, names.INPUT_ITEM]
    assert [o.name for o in graph.output] == [names.OUTPUT_SCORE]
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param  # dynamic batch axis


@pytest.fixture(scope="module")
def real_etl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output of the real `ncf etl` (its Workflow renames the codes to user_id/item_id)."""
    tmp = tmp_path_factory.mktemp("real")
    ratings = etl_fixture.synthetic_ratings(n_users=30, n_items=80, per_user=25, seed=4)
    ratings.to_csv(tmp / "ratings.csv", index=False)
    with etl_fixture.quiet_merlin():
        args = [
            "--input",
            str(tmp / "ratings.csv"),
            "--out",
            str(tmp / "etl"),
            "--eval-negatives",
            "20",
        ]
        code = main(["etl", *args])
    assert code == 0
    return tmp / "etl"


@pytest.mark.parametrize("source", ["etl_dir", "real_etl_dir"])
def test_vocab_tables_equal_workflow_transform(request, source):
    etl = request.getfixturevalue(source)
    meta, _ = read_metadata(etl)
    vocab = tables.vocab_tables(etl, meta)
    workflow = etl_fixture.load_workflow(etl)
    unseen = np.array([0, -1, 10**9])
    for kind, other in (("user", "item"), ("item", "user")):
        raw = np.concatenate([vocab[f"{kind}_raw"], unseen])
        filler = np.resize(vocab[f"{other}_raw"], raw.size)  # the other column: any known ids
        pair = (raw, filler) if kind == "user" else (filler, raw)
        got = etl_fixture.transform(workflow, *pair)[0 if kind == "user" else 1]
        oov = np.full(unseen.size, int(vocab[f"{kind}_oov"]))
        np.testing.assert_array_equal(got, np.concatenate([vocab[f"{kind}_code"], oov]))
    assert np.all(np.diff(vocab["user_raw"]) > 0) and np.all(np.diff(vocab["item_raw"]) > 0)


def test_export_of_real_etl_output(real_etl_dir, tmp_path):
    ckpt = etl_fixture.make_checkpoint(tmp_path / "best.pt", real_etl_dir)
    manifest = export.export_repository(ckpt, real_etl_dir, tmp_path / "repo")
    assert max(manifest["checks"]["max_abs_diff"].values()) <= 1e-5
    meta, _ = read_metadata(real_etl_dir)
    with np.load(tmp_path / "repo" / names.MODEL_RECOMMEND / "1" / names.ARTIFACT_SEEN) as seen:
        held_out = meta["test_rows"] + meta.get("valid_rows", 0)
        assert seen["indices"].size == meta["train_rows"] + held_out


def test_seen_tables_are_each_users_train_and_test_items(tmp_path):
    # users 0..3, items 0..4; user 1 has a duplicate pair, user 2 nothing, user 3 only a test item
    for sub, pairs in (
        (names.TRAIN_DIR, [(0, 4), (0, 1), (1, 2), (1, 2)]),
        (names.TEST_DIR, [(1, 0), (3, 3)]),
    ):
        (tmp_path / sub).mkdir()
        frame = pd.DataFrame(pairs, columns=[names.USER, names.ITEM])
        frame.to_parquet(tmp_path / sub / "part_0.parquet", index=False)
    seen = tables.seen_tables(tmp_path, {"num_users": 4, "num_items": 5})
    np.testing.assert_array_equal(seen["indptr"], [0, 2, 4, 4, 5])
    np.testing.assert_array_equal(seen["indices"], [1, 4, 0, 2, 3])
    # With --holdout valid,test, the valid item is rated too: user 2's item 1 and user 0's item 2.
    (tmp_path / names.VALID_DIR).mkdir()
    valid = pd.DataFrame([(0, 2), (2, 1)], columns=[names.USER, names.ITEM])
    valid.to_parquet(tmp_path / names.VALID_DIR / "part_0.parquet", index=False)
    seen = tables.seen_tables(tmp_path, {"num_users": 4, "num_items": 5})
    np.testing.assert_array_equal(seen["indptr"], [0, 3, 5, 6, 7])
    np.testing.assert_array_equal(seen["indices"], [1, 2, 4, 0, 2, 1, 3])


def test_seen_tables_reject_ids_outside_the_metadata(tmp_path):
    for sub in (names.TRAIN_DIR, names.TEST_DIR):
        (tmp_path / sub).mkdir()
        frame = pd.DataFrame([(0, 7)], columns=[names.USER, names.ITEM])
        frame.to_parquet(tmp_path / sub / "part_0.parquet", index=False)
    with pytest.raises(ValueError, match=r"train: row 0 item_id=7 is outside \[0, 5\)"):
        tables.seen_tables(tmp_path, {"num_users": 4, "num_items": 5})


def test_reexport_adds_a_version_and_prunes_the_oldest(exported, checkpoint, etl_dir, tmp_path):
    repo = shutil.copytree(exported[0], tmp_path / "repo")
    model_py = (repo / names.MODEL_NEUMF / "1" / "model.py").read_bytes()
    other = etl_fixture.make_checkpoint(tmp_path / "other.pt", etl_dir, seed=1)
    second = export.export_repository(other, etl_dir, repo)
    assert second["version"] == 2 and second["export_id"] != exported[1]["export_id"]
    for model in MODEL_ARTIFACTS:  # the old version stays for a server still serving it
        assert repository.versions(repo / model) == [1, 2]
    manifest = json.loads((repo / names.MODEL_NEUMF / "2" / names.MANIFEST_FILE).read_text())
    assert manifest["source"]["checkpoint_sha256"] == _sha(other) != _sha(checkpoint)
    assert manifest["version"] == 2 and manifest["export_id"] == second["export_id"]
    assert (repo / names.MODEL_NEUMF / "2" / "model.py").read_bytes() == model_py
    pt = repo / names.MODEL_NEUMF / "2" / names.ARTIFACT_TORCHSCRIPT
    assert manifest["artifacts"][names.ARTIFACT_TORCHSCRIPT]["sha256"] == _sha(pt)
    third = export.export_repository(checkpoint, etl_dir, repo, keep_versions=2)
    assert third["version"] == 3 and len(third["pruned"]) == len(MODEL_ARTIFACTS)
    assert all(repository.versions(repo / m) == [2, 3] for m in MODEL_ARTIFACTS)
    assert not (repo / names.MODEL_NEUMF / "1").exists()
    assert not list(repo.glob(".tmp-*")) and not list(repo.glob("*/.tmp-*"))


def test_export_never_replaces_or_prunes_a_folder_it_did_not_write(
    exported, checkpoint, etl_dir, tmp_path
):
    repo = shutil.copytree(exported[0], tmp_path / "repo")
    theirs = repo / names.MODEL_NEUMF / "2"  # somebody's own version folder, manifest and all
    theirs.mkdir()
    (theirs / names.MANIFEST_FILE).write_text('{"note": "mine"}')
    (theirs / "weights.bin").write_bytes(b"precious")
    script = repo / names.MODEL_NEUMF / "5"  # and a folder of theirs holding only a model.py
    script.mkdir()
    (script / "model.py").write_text("# mine")
    second = export.export_repository(checkpoint, etl_dir, repo, keep_versions=1)
    assert second["version"] == 6  # past every numbered folder, not into theirs
    assert (script / "model.py").read_text() == "# mine"  # neither replaced nor copied
    assert (repo / names.MODEL_NEUMF / "6" / "model.py").read_text() != "# mine"
    assert (theirs / "weights.bin").read_bytes() == b"precious"
    assert repository.versions(repo / names.MODEL_NEUMF) == [6]  # ours pruned, theirs kept
    assert str(theirs) not in second["pruned"]
    with pytest.raises(FileExistsError, match=r"neumf/2 is a folder holding manifest.json"):
        repository.check_target(theirs)
    repository.check_target(repo / names.MODEL_NEUMF / "6")  # an export's own: replaceable
    with pytest.raises(FileExistsError, match=r"neumf/5 is a folder holding model.py"):
        repository.check_target(script)


def test_pruning_the_project_repository_keeps_its_committed_python_models(
    exported, monkeypatch, tmp_path
):
    repo = shutil.copytree(exported[0], tmp_path / "project")
    monkeypatch.setattr(repository, "project_repo", lambda: repo)
    for version in ("2", "3"):
        shutil.copytree(repo / names.MODEL_RECOMMEND / "1", repo / names.MODEL_RECOMMEND / version)
    removed = repository.prune_versions(repo, keep=1)
    assert repo / names.MODEL_RECOMMEND / "1" in removed
    assert sorted(p.name for p in (repo / names.MODEL_RECOMMEND / "1").iterdir()) == ["model.py"]
    assert not (repo / names.MODEL_RECOMMEND / "2").exists()
    assert repository.versions(repo / names.MODEL_RECOMMEND) == [3]
    with pytest.raises(ValueError, match="keep=0"):
        repository.prune_versions(repo, keep=0)


def test_popularity_ranks_the_catalogue_by_training_users(tmp_path):
    # items 3..6 (ids 0..2 reserved); train: item 5 rated by 3 users, 4 by 2, 3 and 6 by 1 each
    pairs = [(3, 5), (4, 5), (5, 5), (3, 4), (4, 4), (5, 6), (3, 3)]
    (tmp_path / names.TRAIN_DIR).mkdir()
    frame = pd.DataFrame(pairs, columns=[names.USER, names.ITEM])
    frame.to_parquet(tmp_path / names.TRAIN_DIR / "part_0.parquet", index=False)
    meta = {"num_users": 6, "num_items": 7, "item_id_range": [3, 7]}
    pop = tables.popularity_tables(tmp_path, meta)
    np.testing.assert_array_equal(pop["items"], [5, 4, 3, 6])  # ties: lower id first
    np.testing.assert_allclose(pop["share"], [1, 2 / 3, 1 / 3, 1 / 3], rtol=1e-6)
    assert pop["share"].dtype == np.float32


def test_gmf_vectors_give_the_gmf_part_of_the_logit(exported, checkpoint, etl_dir):
    repo, _ = exported
    model, _ = load_model(checkpoint)
    meta = json.loads((etl_dir / names.METADATA_FILE).read_text())
    lo, f = meta["item_id_range"][0], model.cfg.factors
    with np.load(repo / names.MODEL_RECOMMEND / "1" / names.ARTIFACT_GMF) as gmf:
        got = gmf["users"][5] @ gmf["items"][7 - lo]
    with torch.no_grad():
        mf = model.mf_user_embed.weight[5] * model.mf_item_embed.weight[7]
        want = float(mf @ model.final.weight[0, :f])
    assert got == pytest.approx(want, rel=1e-5)


def test_checkpoint_for_other_data_is_refused_and_nothing_written(exported, etl_dir, tmp_path):
    repo = shutil.copytree(exported[0], tmp_path / "repo")
    before = _snapshot(repo)
    cfg = NeuMFConfig(num_users=5, num_items=6, factors=4, mlp_layers=[8, 4])
    bad = tmp_path / "bad.pt"
    torch.save({"model": NeuMF(cfg).state_dict(), "config": cfg.to_dict(), "epoch": 0}, bad)
    with pytest.raises(ValueError, match="num_users=5, num_items=6"):
        export.export_repository(bad, etl_dir, repo)
    assert _snapshot(repo) == before


def test_metadata_hash_mismatch_needs_the_override(checkpoint, etl_dir, tmp_path):
    data = shutil.copytree(etl_dir, tmp_path / "etl")
    meta = json.loads((data / names.METADATA_FILE).read_text())
    (data / names.METADATA_FILE).write_text(json.dumps({**meta, "note": "rewritten"}))
    with pytest.raises(ValueError, match="--ignore-data-hash"):
        export.export_repository(checkpoint, data, tmp_path / "repo")
    export.export_repository(checkpoint, data, tmp_path / "repo", ignore_data_hash=True)
    assert (tmp_path / "repo" / names.MODEL_WORKFLOW / "1" / names.ARTIFACT_VOCAB).is_file()


def test_cli_export_names_a_truncated_checkpoint_in_one_line(checkpoint, etl_dir, tmp_path, capsys):
    bad = tmp_path / "best.pt"
    bad.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    args = [
        "export",
        "--checkpoint",
        str(bad),
        "--data",
        str(etl_dir),
        "--repo",
        str(tmp_path / "r"),
    ]
    assert main(args) == 2
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(errors) == 1 and str(bad) in errors[0] and "truncated or corrupt" in errors[0]


def test_cli_export_prints_the_checks(checkpoint, etl_dir, tmp_path, capsys):
    repo = tmp_path / "repo"
    args = ["export", "--checkpoint", str(checkpoint), "--data", str(etl_dir), "--repo", str(repo)]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["repo"] == str(repo.resolve()) and max(summary["max_abs_diff"].values()) <= 1e-5
    assert main([*args[:3], "--data", str(tmp_path / "missing")]) == 2
    assert "no ETL metadata" in capsys.readouterr().err


def test_cli_export_to_a_server_that_does_not_answer_writes_nothing(
    checkpoint, etl_dir, tmp_path, capsys
):
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    repo = tmp_path / "repo"
    args = ["export", "--checkpoint", str(checkpoint), "--data", str(etl_dir), "--repo", str(repo)]
    assert main([*args, "--server-url", url]) == 1
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(errors) == 1 and f"no tritonserver answers at {url}" in errors[0], errors
    assert not repo.exists()


def test_manifest_ids_are_checked(etl_dir, tmp_path):
    data = shutil.copytree(etl_dir, tmp_path / "etl")
    meta = json.loads((data / names.METADATA_FILE).read_text())
    meta["item_id_range"] = [3, meta["num_items"] + 1]
    (data / names.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"item_id_range \[3, \d+\] is not inside"):
        read_metadata(data)


def test_serving_wrapper_shapes():
    model = NeuMF(NeuMFConfig(num_users=4, num_items=5, factors=2, mlp_layers=[4, 2])).eval()
    out = export.ServingNeuMF(model)(torch.tensor([[1], [2]]), torch.tensor([[3], [4]]))
    assert (
        out.shape == (2, 1) and out.dtype == torch.float32 and bool(((out > 0) & (out < 1)).all())
    )


@pytest.mark.parametrize(
    "exporter",
    [
        pytest.param(
            "dynamo",
            marks=pytest.mark.skipif(
                not export.dynamo_exporter_available(),
                reason="no torch.export-based ONNX exporter here (torch < 2.5 or no onnxscript)",
            ),
        ),
        "legacy",
    ],
)
def test_both_onnx_exporters_give_a_dynamic_batch_model_equal_to_eager(
    checkpoint, etl_dir, exporter
):
    meta, _ = read_metadata(etl_dir)
    model, _ = load_model(checkpoint)
    wrapper = export.ServingNeuMF(model).eval()
    data = export.to_onnx(wrapper, export.random_ids(meta, 8, seed=0), exporter)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for batch in (1, 77):
        users, items = export.random_ids(meta, batch, seed=batch)
        got = session.run(None, {names.INPUT_USER: users.numpy(), names.INPUT_ITEM: items.numpy()})[
            0
        ]
        with torch.no_grad():
            np.testing.assert_allclose(got, wrapper(users, items).numpy(), rtol=0, atol=1e-5)


def test_unknown_onnx_exporter_is_refused():
    with pytest.raises(ValueError, match="--onnx-exporter='tf2onnx'"):
        export.resolve_onnx_exporter("tf2onnx")
