"""NeuMF pretraining (``--pretrain gmf-mlp``): the towers alone, NeuMF built from them, the run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ncf.core import faults
from ncf.models import checkpoint, train
from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.models.presets import TrainConfig
from ncf.models.pretrain import TOWER_RUNS, combine, figures, tower_config
from ncf.models.trainer import METRICS_FILE
from tests.models.conftest import FAST, parse
from tests.models.etl_data import planted_ratings
from tests.models.valid_split import write_valid_etl_dir

SIZES = {"num_users": 5, "num_items": 7, "factors": 3, "mlp_layers": [6, 4, 2]}
USERS, ITEMS = torch.tensor([0, 1, 4, 4]), torch.tensor([6, 2, 0, 3])


def _tower(towers: str, seed: int) -> NeuMF:
    torch.manual_seed(seed)
    model = NeuMF(NeuMFConfig(**SIZES, towers=towers)).eval()
    with torch.no_grad():  # weights far from the small init, so that every term counts
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def test_gmf_tower_alone_by_hand():
    m = _tower("gmf", 0)
    assert {n for n, _ in m.named_children()} == {"mf_user_embed", "mf_item_embed", "mlp", "final"}
    assert len(m.mlp) == 0 and m.dropout_widths() == []
    gmf = m.mf_user_embed.weight[USERS] * m.mf_item_embed.weight[ITEMS]  # [4, factors]
    want = gmf @ m.final.weight[0] + m.final.bias
    torch.testing.assert_close(m(USERS, ITEMS), want)


def test_mlp_tower_alone_by_hand():
    m = _tower("mlp", 0)
    assert not hasattr(m, "mf_user_embed") and m.final.in_features == 2
    x = torch.cat((m.mlp_user_embed.weight[USERS], m.mlp_item_embed.weight[ITEMS]), dim=1)  # [4, 6]
    for layer in m.mlp:
        x = torch.relu(x @ layer.weight.T + layer.bias)
    torch.testing.assert_close(m(USERS, ITEMS), x @ m.final.weight[0] + m.final.bias)


def test_combine_output_layer_by_hand():
    gmf = {"final.weight": torch.tensor([[1.0, 2.0]]), "final.bias": torch.tensor([0.5]), "a": 1}
    mlp = {"final.weight": torch.tensor([[3.0]]), "final.bias": torch.tensor([-1.0]), "b": 2}
    got = combine(gmf, mlp, 0.25)
    torch.testing.assert_close(got["final.weight"], torch.tensor([[0.25, 0.5, 2.25]]))
    torch.testing.assert_close(got["final.bias"], torch.tensor([0.25 * 0.5 - 0.75]))
    assert (got["a"], got["b"]) == (1, 2)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
def test_neumf_from_towers_is_the_alpha_weighted_logit(alpha: float):
    gmf, mlp = _tower("gmf", 1), _tower("mlp", 2)
    neumf = NeuMF(NeuMFConfig(**SIZES)).eval()
    neumf.load_state_dict(combine(gmf.state_dict(), mlp.state_dict(), alpha))  # strict: all keys
    torch.testing.assert_close(
        neumf(USERS, ITEMS), alpha * gmf(USERS, ITEMS) + (1 - alpha) * mlp(USERS, ITEMS)
    )


@pytest.mark.parametrize("towers", ["both", "gmf", "mlp"])
def test_every_tower_scripts(towers: str):
    model = _tower(towers, 3)
    torch.testing.assert_close(torch.jit.script(model)(USERS, ITEMS), model(USERS, ITEMS))


def test_tower_runs_are_plain_runs_of_one_tower():
    hp = TrainConfig(pretrain="gmf-mlp", pretrain_epochs=3, pretrain_alpha=0.2, pretrain_lr=0.1)
    got = tower_config(hp, "mlp")
    assert got == TrainConfig(towers="mlp", epochs=3)
    assert tower_config(hp.replace(pretrain_epochs=0, epochs=9), "gmf").epochs == 9
    assert got.optimizer_lr() == got.lr and hp.optimizer_lr() == 0.1


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"pretrain": "gmf-mlp", "model": "mf"}, "--pretrain gmf-mlp with --model mf"),
        ({"pretrain": "gmf-mlp", "towers": "gmf"}, "--towers gmf: pretraining builds"),
        ({"pretrain": "gmf-mlp", "pretrain_alpha": 1.5}, "--pretrain-alpha 1.5"),
        ({"pretrain_epochs": -1}, "--pretrain-epochs -1"),
        ({"pretrain_lr": -0.1}, "--pretrain-lr -0.1"),
        ({"pretrain": "mlp-first"}, "--pretrain 'mlp-first'"),
    ],
)
def test_bad_pretraining_settings_are_refused(values: dict, match: str):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**values).check()


# -- the run ---------------------------------------------------------------------------------------

# 1200 training rows x (1 + 4 negatives) / batch 256: 24 optimizer steps per epoch; 3 epochs each
# run (GMF, MLP, NeuMF); a small NeuMF, as only the wiring is under test.
SMALL = ["--factors", "8", "--layers", "32", "16", "8"]
ARGS = [*FAST, *SMALL, "--epochs", "3", "--pretrain", "gmf-mlp", "--deterministic"]
STEPS_PER_EPOCH = 24


@pytest.fixture(scope="module")
def valid_etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_valid_etl_dir(planted_ratings(), tmp_path_factory.mktemp("etl") / "planted")


@pytest.fixture(scope="module")
def reference(valid_etl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "run"
    assert train.run(parse(train, ["--data", valid_etl, "--out", out, *ARGS])) == 0
    return out


def test_the_run_records_its_tower_runs(reference: Path):
    metrics = json.loads((reference / METRICS_FILE).read_text())
    assert metrics["pretrain"] == {
        "mode": "gmf-mlp",
        "alpha": 0.5,
        "runs": {t: figures(reference / name, 10) for t, name in TOWER_RUNS.items()},
    }
    for tower, name in TOWER_RUNS.items():
        sub = json.loads((reference / name / METRICS_FILE).read_text())
        assert sub["config"]["towers"] == tower and sub["protocol"] == "valid-selected"
        got = metrics["pretrain"]["runs"][tower]
        assert (got["hr@10"], got["best_epoch"]) == (sub["valid"]["hr@10"], sub["best_epoch"])
        rerun = json.loads((reference / name / train.CONFIG_FILE).read_text())
        assert rerun["stage"] == "train" and rerun["config"]["hp"]["towers"] == tower


def test_neumf_starts_from_the_towers_best_epochs(valid_etl: Path, tmp_path: Path):
    out = tmp_path / "run"
    # An Adam step moves a weight by about lr: at 1e-9 NeuMF ends where it started.
    argv = ["--data", valid_etl, "--out", out, *ARGS, "--epochs", "1", "--pretrain-lr", "1e-9"]
    assert train.run(parse(train, argv)) == 0
    best = {
        t: checkpoint.load(out / name / checkpoint.BEST)["model"] for t, name in TOWER_RUNS.items()
    }
    want = combine(best["gmf"], best["mlp"], 0.5)
    got = checkpoint.load(out / checkpoint.BEST)["model"]
    assert set(got) == set(want)
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0)


def test_kill_in_a_tower_run_then_resume_matches_uninterrupted(
    valid_etl: Path, reference: Path, tmp_path: Path
):
    run = tmp_path / "killed"
    # In the MLP run's epoch 2: its last.pt holds epoch 0 or 1 (epoch 1's is written meanwhile).
    fault = f"{faults.OPTIMIZER_STEP}:{3 * STEPS_PER_EPOCH + 2 * STEPS_PER_EPOCH + 5}"
    argv = [sys.executable, "-m", "ncf.cli", "train", "--data", valid_etl, "--out", run, *ARGS]
    done = subprocess.run(
        list(map(str, argv)), env={**os.environ, faults.ENV: fault}, capture_output=True, text=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert (run / TOWER_RUNS["gmf"] / METRICS_FILE).exists()
    assert not (run / TOWER_RUNS["mlp"] / METRICS_FILE).exists()
    with pytest.raises(FileExistsError, match="pretrain-gmf.*--resume"):
        train.run(parse(train, ["--data", valid_etl, "--out", run, *ARGS]))
    assert train.run(parse(train, ["--data", valid_etl, "--out", run, *ARGS, "--resume"])) == 0
    for name in ("", *TOWER_RUNS.values()):
        got = checkpoint.load(run / name / checkpoint.BEST)["model"]
        want = checkpoint.load(reference / name / checkpoint.BEST)["model"]
        assert all(torch.equal(got[k], want[k]) for k in want), name
    got, want = (json.loads((r / METRICS_FILE).read_text()) for r in (run, reference))
    assert got["history"][-1]["loss"] == want["history"][-1]["loss"]
    assert got["valid"] == want["valid"]


def test_force_without_pretraining_removes_the_tower_runs(
    valid_etl: Path, reference: Path, tmp_path: Path
):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "notes.txt").write_text("mine")
    (run / TOWER_RUNS["mlp"] / "notes.txt").write_text("mine")
    argv = ["--data", valid_etl, "--out", run, *FAST, *SMALL, "--epochs", "1", "--force"]
    assert train.run(parse(train, argv)) == 0
    assert not (run / TOWER_RUNS["gmf"]).exists()  # only what ncf train wrote is removed
    assert sorted(p.name for p in (run / TOWER_RUNS["mlp"]).iterdir()) == ["notes.txt"]
    assert "pretrain" not in json.loads((run / METRICS_FILE).read_text())


def test_export_refuses_a_tower_alone(valid_etl: Path, reference: Path, tmp_path: Path):
    from ncf.serving.export import export_repository

    gmf = reference / TOWER_RUNS["gmf"] / checkpoint.BEST
    with pytest.raises(ValueError, match="its gmf tower alone"):
        export_repository(gmf, valid_etl, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_tune_refuses_pretraining(valid_etl: Path, tmp_path: Path):
    from ncf.models import tune

    argv = ["--data", valid_etl, "--out", tmp_path / "t", "--pretrain", "gmf-mlp"]
    with pytest.raises(ValueError, match="--pretrain gmf-mlp: `ncf tune`'s trials train NeuMF"):
        parse(tune, argv)
