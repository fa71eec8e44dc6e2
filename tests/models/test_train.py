"""`ncf train` / `ncf evaluate` in-process on planted data: learning, outputs, resume, flags."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from ncf.core import names
from ncf.core.dllog import read_log
from ncf.models import checkpoint, evaluate, train
from ncf.models.selection import DLE_PROTOCOL, VALID_PROTOCOL
from ncf.models.trainer import LOG_FILE, METRICS_FILE, PLOT_FILE, Trainer
from ncf.workflows.etl import EtlConfig, run_etl
from tests.models.conftest import FAST, parse
from tests.models.etl_data import planted_ratings

EPOCHS = 4


def _train(etl: Path, out: Path, *extra) -> dict:
    assert train.run(parse(train, ["--data", etl, "--out", out, *FAST, *extra])) == 0
    return json.loads((out / METRICS_FILE).read_text())


@pytest.fixture(scope="module")
def run_dir(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "straight"
    _train(etl_dir, out, "--epochs", EPOCHS, "--deterministic")
    return out


def test_learns_far_beyond_itempop_and_chance(run_dir: Path):
    m = json.loads((run_dir / METRICS_FILE).read_text())
    chance = 10 / 21  # 1 held-out item among 20 negatives
    assert m["hr@10"] > m["itempop_hr@10"] + 0.2 and m["hr@10"] > chance + 0.2
    assert m["ndcg@10"] > m["itempop_ndcg@10"]
    first = m["history"][0]
    assert m["history"][-1]["loss"] < first["loss"]
    assert m["epochs_run"] == EPOCHS and m["config"]["negative_sampling"] == "exact"
    # Without valid/: DLE's protocol, the keys of before.
    assert m["protocol"] == DLE_PROTOCOL and "valid" not in m and "test" not in m
    assert m["hr@10"] == m["best_accuracy"] == max(h["hr@10"] for h in m["history"])


def test_outputs_follow_the_contracts(run_dir: Path):
    for name in (checkpoint.BEST, checkpoint.LAST):
        checkpoint.verify(run_dir / name)
        state = torch.load(run_dir / name, weights_only=True)
        assert {"model", "config", "epoch", "metrics", "data"} <= state.keys()
    last = torch.load(run_dir / checkpoint.LAST, weights_only=True)
    assert {"optimizer", "scaler", "rng"} <= last.keys() and last["epoch"] == EPOCHS - 1
    records = read_log(run_dir / LOG_FILE)
    params = [r for r in records if r.get("step") == "PARAMETER"]
    assert params[0]["data"]["lr"] == 0.01 and params[0]["data"]["batch_size"] == 256
    epochs = [r for r in records if isinstance(r.get("step"), list) and r["step"]]
    assert [r["step"] for r in epochs] == [[e] for e in range(EPOCHS)]
    per_epoch = {
        "train_throughput",
        "loss",
        "hr@10",
        "ndcg@10",
        "train_epoch_time",
        "eval_epoch_time",
        "eval_throughput",
    }
    assert per_epoch <= epochs[0]["data"].keys()
    final = [r for r in records if r.get("step") == []][-1]["data"]
    assert {
        "best_accuracy",
        "best_epoch",
        "time_to_target",
        "time_to_best_model",
        "mean_train_throughput",
        "best_train_throughput",
    } <= final.keys()
    assert (run_dir / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_reports_model_and_itempop(run_dir: Path, etl_dir: Path, capsys):
    out = run_dir / "evaluation.json"
    args = parse(
        evaluate,
        [
            "--data",
            etl_dir,
            "--checkpoint",
            run_dir / checkpoint.BEST,
            "--out",
            out,
            "--device",
            "cpu",
        ],
    )
    assert evaluate.run(args) == 0
    printed = capsys.readouterr().out
    assert "model" in printed and "ItemPop" in printed
    report = json.loads(out.read_text())
    trained = json.loads((run_dir / METRICS_FILE).read_text())
    assert report["hr@10"] == pytest.approx(trained["hr@10"], abs=1e-12)
    assert report["itempop_hr@10"] == pytest.approx(trained["itempop_hr@10"], abs=1e-12)


def test_resume_equals_an_uninterrupted_run(run_dir: Path, etl_dir: Path, tmp_path: Path):
    out = tmp_path / "resumed"
    _train(etl_dir, out, "--epochs", 2, "--deterministic")
    resumed = _train(etl_dir, out, "--epochs", EPOCHS, "--deterministic", "--resume")
    straight = json.loads((run_dir / METRICS_FILE).read_text())
    keys = ("epoch", "loss", "hr@10", "ndcg@10")
    assert [[h[k] for k in keys] for h in resumed["history"]] == [
        [h[k] for k in keys] for h in straight["history"]
    ]
    a = torch.load(out / checkpoint.LAST, weights_only=True)["model"]
    b = torch.load(run_dir / checkpoint.LAST, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_other_settings_is_refused(etl_dir: Path, tmp_path: Path):
    out = tmp_path / "run"
    _train(etl_dir, out, "--epochs", 1)
    with pytest.raises(ValueError, match="different settings.*'lr': \\(0.01, 0.02\\)"):
        _train(etl_dir, out, "--epochs", 2, "--resume", "--lr", "0.02")
    with pytest.raises(FileExistsError, match="--resume to continue"):
        _train(etl_dir, out, "--epochs", 2)
    assert _train(etl_dir, out, "--epochs", 1, "--force")["epochs_run"] == 1


def test_gradient_accumulation_keeps_the_math(etl_dir: Path, tmp_path: Path):
    """One global batch of 256 in 1 or 4 micro-batches: same gradient up to float summation order.

    Adam with beta2 = 0.5 amplifies those rounding differences on near-zero gradients after a few
    dozen steps (torch 2.1: 1.7e-4 relative in the second epoch's loss), hence two tolerances.
    """
    one = _train(etl_dir, tmp_path / "a", "--epochs", 2)
    four = _train(etl_dir, tmp_path / "b", "--epochs", 2, "--grad-accumulation", 4)
    for epoch, (h1, h4) in enumerate(zip(one["history"], four["history"], strict=True)):
        assert h4["loss"] == pytest.approx(h1["loss"], rel=1e-5 if epoch == 0 else 1e-3)
        assert h4["hr@10"] == pytest.approx(h1["hr@10"], abs=0.03)


def test_threshold_stops_early_and_approximate_mode(etl_dir: Path, tmp_path: Path):
    m = _train(
        etl_dir,
        tmp_path / "t",
        "--epochs",
        10,
        "--threshold",
        0.6,
        "--negative-sampling",
        "approximate",
    )
    assert m["epochs_run"] < 10 and m["hr@10"] >= 0.6
    assert m["time_to_target"] is not None and m["config"]["negative_sampling"] == "approximate"


# -- the valid-selected protocol (ETL with --holdout valid,test) ------------------------------


@pytest.fixture(scope="module")
def valid_etl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real `ncf etl --holdout valid,test` (pandas engine) of the planted ratings."""
    frame = planted_ratings()
    root = tmp_path_factory.mktemp("valid-etl")
    ratings = pd.DataFrame(
        {
            "userId": frame.user + 1,
            "movieId": frame.item + 1,
            "rating": 4.0,
            "timestamp": frame.time,
        }
    )
    ratings.to_csv(root / "ratings.csv", index=False)
    run_etl(
        EtlConfig(
            input=root / "ratings.csv",
            out=root / "etl",
            eval_negatives=20,
            min_ratings=1,
            engine="pandas",
            holdout="valid,test",
        )
    )
    return root / "etl"


@pytest.fixture(scope="module")
def valid_run(valid_etl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "valid"
    _train(valid_etl, out, "--epochs", EPOCHS, "--deterministic")
    return out


def _valid_curve(m: dict) -> list[list]:
    return [[h[k] for k in ("epoch", "loss", "valid_hr@10", "valid_ndcg@10")] for h in m["history"]]


def test_valid_protocol_selects_on_validation(valid_run: Path):
    m = json.loads((valid_run / METRICS_FILE).read_text())
    assert m["protocol"] == VALID_PROTOCOL and m["valid_users"] == m["test_users"] == 120
    assert all("hr@10" not in h and "ndcg@10" not in h for h in m["history"])
    best = max(m["history"], key=lambda h: (h["valid_hr@10"], h["valid_ndcg@10"], -h["epoch"]))
    assert m["best_epoch"] == best["epoch"]
    assert m["valid"]["hr@10"] == best["valid_hr@10"]
    assert m["valid"]["ndcg@10"] == best["valid_ndcg@10"]
    state = torch.load(valid_run / checkpoint.BEST, weights_only=True)
    assert state["epoch"] == best["epoch"]
    assert state["metrics"] == {
        "valid_hr@10": best["valid_hr@10"],
        "valid_ndcg@10": best["valid_ndcg@10"],
    }
    # The headline figures are the test split's, of that epoch; the model learned.
    assert (m["hr@10"], m["ndcg@10"]) == (m["test"]["hr@10"], m["test"]["ndcg@10"])
    assert m["test"]["hr@10"] > m["itempop_hr@10"] + 0.2
    assert m["valid"]["hr@10"] > m["valid"]["itempop_hr@10"] + 0.2
    records = read_log(valid_run / LOG_FILE)
    epochs = [r["data"] for r in records if isinstance(r.get("step"), list) and r["step"]]
    assert len(epochs) == m["epochs_run"]
    assert all({"valid_hr@10", "valid_ndcg@10"} <= e.keys() and "hr@10" not in e for e in epochs)
    final = [r for r in records if r.get("step") == []][-1]["data"]
    assert final["test_hr@10"] == m["test"]["hr@10"] and final["best_epoch"] == m["best_epoch"]
    assert "best_accuracy" not in final and final["best_valid_hr@10"] == m["valid"]["hr@10"]


def test_valid_protocol_scores_test_once_with_best_pt(valid_etl: Path, tmp_path: Path, monkeypatch):
    splits: list[str] = []
    original = Trainer.evaluate

    def spy(self, split="test"):
        splits.append(split)
        return original(self, split)

    monkeypatch.setattr(Trainer, "evaluate", spy)
    out = tmp_path / "run"
    m = _train(valid_etl, out, "--epochs", 3)
    assert splits == ["valid", "valid", "valid", "test"]
    # `ncf evaluate` of best.pt on the test split gives the test block.
    args = parse(evaluate, ["--data", valid_etl, "--checkpoint", out / checkpoint.BEST, "--out",
                            out / "e.json", "--device", "cpu"])  # fmt: skip
    assert evaluate.run(args) == 0
    report = json.loads((out / "e.json").read_text())
    assert report["epoch"] == m["best_epoch"]
    assert report["hr@10"] == pytest.approx(m["test"]["hr@10"], abs=1e-12)
    assert report["ndcg@10"] == pytest.approx(m["test"]["ndcg@10"], abs=1e-12)


def test_model_choice_never_reads_the_test_split(valid_etl: Path, valid_run: Path, tmp_path: Path):
    """Corrupt test/ and negatives/ after the ETL: the curve, chosen epoch and valid figures stay."""
    bad = tmp_path / "etl"
    shutil.copytree(valid_etl, bad)
    part = "part_0.parquet"
    test = pd.read_parquet(bad / names.TEST_DIR / part)
    train = pd.read_parquet(bad / names.TRAIN_DIR / part)
    # Each test item becomes one of the user's training items; the test negatives become the
    # valid negatives (both still pass load_etl's checks).
    first_train = train.groupby(names.USER)[names.ITEM].first()
    test[names.ITEM] = first_train.loc[test[names.USER]].to_numpy()
    test.to_parquet(bad / names.TEST_DIR / part, index=False)
    shutil.copy(bad / names.VALID_NEGATIVES_DIR / part, bad / names.NEGATIVES_DIR / part)
    corrupted = _train(bad, tmp_path / "run", "--epochs", EPOCHS, "--deterministic")
    clean = json.loads((valid_run / METRICS_FILE).read_text())
    assert _valid_curve(corrupted) == _valid_curve(clean)
    assert corrupted["best_epoch"] == clean["best_epoch"]
    assert corrupted["valid"] == clean["valid"]
    assert corrupted["test"] != clean["test"]  # the corruption is seen where test is read


def test_valid_resume_equals_an_uninterrupted_run(valid_etl: Path, valid_run: Path, tmp_path: Path):
    out = tmp_path / "resumed"
    _train(valid_etl, out, "--epochs", 2, "--deterministic")
    resumed = _train(valid_etl, out, "--epochs", EPOCHS, "--deterministic", "--resume")
    straight = json.loads((valid_run / METRICS_FILE).read_text())
    assert _valid_curve(resumed) == _valid_curve(straight)
    assert resumed["best_epoch"] == straight["best_epoch"]
    assert resumed["test"] == straight["test"] and resumed["valid"] == straight["valid"]


def test_patience_stops_after_n_epochs_without_improvement(valid_etl: Path, tmp_path: Path):
    m = _train(valid_etl, tmp_path / "p", "--epochs", 12, "--patience", 1, "--deterministic")
    assert m["epochs_run"] == m["best_epoch"] + 2 < 12
    assert m["config"]["patience"] == 1
    # --min-epochs holds the same patience back: the run goes on past where it stopped
    floor = m["epochs_run"] + 2
    held = _train(valid_etl, tmp_path / "h", "--epochs", 12, "--patience", 1, "--min-epochs",
                  floor, "--deterministic")  # fmt: skip
    assert held["epochs_run"] == min(12, max(floor, held["best_epoch"] + 2))
    assert held["epochs_run"] >= min(12, floor) and held["config"]["min_epochs"] == floor


def test_evaluate_out_replaces_only_its_own_result(run_dir: Path, etl_dir: Path, tmp_path: Path):
    out = tmp_path / "e.json"
    argv = ["--data", etl_dir, "--checkpoint", run_dir / checkpoint.BEST, "--out", out]
    argv += ["--device", "cpu", "--threads", "1"]
    out.write_text("my notes")
    for force in ([], ["--force"]):  # not a result of ncf evaluate: refused either way
        with pytest.raises(FileExistsError, match="not written by `ncf evaluate`"):
            evaluate.run(parse(evaluate, [*argv, *force]))
    assert out.read_text() == "my notes"
    out.unlink()
    assert evaluate.run(parse(evaluate, argv)) == 0
    with pytest.raises(FileExistsError, match="pass --force"):
        evaluate.run(parse(evaluate, argv))
    assert evaluate.run(parse(evaluate, [*argv, "--force"])) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["e.json"]


def test_softmax_loss_learns_far_beyond_itempop(etl_dir: Path, tmp_path: Path):
    """``--loss softmax`` through the CLI: a batch that is no multiple of the group (1 + 4
    negatives) is cut at whole groups, and the model learns as the BCE one does."""
    m = _train(etl_dir, tmp_path / "softmax", "--epochs", EPOCHS, "--loss", "softmax",
               "--batch-size", 254)  # fmt: skip
    assert m["config"]["loss"] == "softmax"
    assert m["hr@10"] > m["itempop_hr@10"] + 0.2
    assert m["history"][-1]["loss"] < m["history"][0]["loss"]
