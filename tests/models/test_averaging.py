"""The moving average of the weights (models/averaging.py, ``--ema-epochs``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ncf.models import checkpoint, evaluate
from ncf.models.averaging import WeightAverage
from ncf.models.data import load_etl
from ncf.models.distributed import dist_env
from ncf.models.presets import TrainConfig
from ncf.models.trainer import RunOptions, Trainer
from tests.models.conftest import parse
from tests.models.test_train import _train, valid_etl  # noqa: F401 (a fixture)

EMA = ("--ema-epochs", "0.5", "--deterministic")  # about 11 steps: decay about 0.91


def _set(model: nn.Linear, w: float) -> None:
    with torch.no_grad():
        model.weight.fill_(w)
        model.bias.fill_(-w)


def test_average_by_hand():
    model, avg = nn.Linear(2, 1), WeightAverage(0.75)
    for w in (4.0, 8.0, 0.0):  # three optimizer steps leave these weights
        _set(model, w)
        avg.update(model)
    # 4 (the first step's weights), then 0.75 * 4 + 0.25 * 8 = 5, then 0.75 * 5 + 0 = 3.75
    state = avg.state_dict(model)
    torch.testing.assert_close(state["weight"], torch.full((1, 2), 3.75))
    torch.testing.assert_close(state["bias"], torch.full((1,), -3.75))
    with avg.applied(model):
        torch.testing.assert_close(model.weight, torch.full((1, 2), 3.75))
    assert torch.equal(model.weight, torch.zeros(1, 2))  # its own weights again
    again = WeightAverage(0.75)
    again.load(model, state)
    assert all(torch.equal(again.avg[k], avg.avg[k]) for k in avg.avg)


def test_before_any_step_the_weights_are_their_own():
    model, avg = nn.Linear(2, 1), WeightAverage(0.9)
    _set(model, 2.0)
    with avg.applied(model):
        assert torch.equal(model.weight, torch.full((1, 2), 2.0))
    assert torch.equal(avg.state_dict(model)["weight"], model.weight)


@pytest.mark.parametrize("epochs", [-0.5, float("inf")])
def test_a_span_outside_zero_infinity_is_refused(valid_etl: Path, tmp_path: Path, epochs: float):  # noqa: F811
    with pytest.raises(ValueError, match=f"--ema-epochs {epochs}: use a span >= 0 epochs"):
        _train(valid_etl, tmp_path / "r", "--ema-epochs", epochs)


@pytest.mark.parametrize(
    ("epochs", "steps", "decay"),
    [(0.0, 100, 0.0), (2.0, 250, 0.998), (0.5, 1, 0.0), (1.0, 4, 0.75)],
)
def test_the_span_in_epochs_sets_the_decay_per_step(epochs: float, steps: int, decay: float):
    assert TrainConfig(ema_epochs=epochs).ema_decay(steps) == pytest.approx(decay, abs=1e-15)


def test_the_average_is_what_is_selected_saved_and_resumed(valid_etl: Path, tmp_path: Path):  # noqa: F811
    out = tmp_path / "ema"
    m = _train(valid_etl, out, "--epochs", 3, *EMA)
    plain = _train(valid_etl, tmp_path / "plain", "--epochs", 3, "--deterministic")
    assert m["config"]["ema_epochs"] == 0.5
    assert [h["loss"] for h in m["history"]] == [h["loss"] for h in plain["history"]]
    assert [h["valid_hr@10"] for h in m["history"]] != [h["valid_hr@10"] for h in plain["history"]]
    last = torch.load(out / checkpoint.LAST, weights_only=True)
    assert not torch.equal(last["model"]["mf_item_embed.weight"],
                           last["trained_model"]["mf_item_embed.weight"])  # fmt: skip
    # `ncf evaluate` of best.pt (the average) gives the run's test block.
    args = parse(evaluate, ["--data", valid_etl, "--checkpoint", out / checkpoint.BEST, "--out",
                            out / "e.json", "--device", "cpu"])  # fmt: skip
    assert evaluate.run(args) == 0
    report = json.loads((out / "e.json").read_text())
    assert report["hr@10"] == pytest.approx(m["test"]["hr@10"], abs=1e-12)
    # --resume continues both the weights and their average.
    resumed_dir = tmp_path / "resumed"
    _train(valid_etl, resumed_dir, "--epochs", 2, *EMA)
    resumed = _train(valid_etl, resumed_dir, "--epochs", 3, *EMA, "--resume")
    keys = ("loss", "valid_hr@10", "valid_ndcg@10")
    assert [[h[k] for k in keys] for h in resumed["history"]] == [
        [h[k] for k in keys] for h in m["history"]
    ]
    assert resumed["test"] == m["test"]
    again = torch.load(resumed_dir / checkpoint.LAST, weights_only=True)
    for part in ("model", "trained_model"):
        assert all(torch.equal(again[part][k], last[part][k]) for k in last[part]), part


def test_the_test_split_scores_best_pt_s_average(valid_etl: Path, tmp_path: Path):  # noqa: F811
    """After the epochs the trainer's average is the last epoch's; scoring best.pt on test must
    use best.pt's (here the average is zeroed first: a model of zeros ranks nothing)."""
    out = tmp_path / "run"
    cfg = TrainConfig(epochs=2, batch_size=256, ema_epochs=0.5, seed=1)
    tr = Trainer(load_etl(valid_etl), cfg, dist_env("cpu"), RunOptions(out=out, etl_dir=valid_etl))
    out.mkdir()
    tr.fit()
    want = tr.test_result
    for a in tr.average.avg.values():
        a.zero_()
    assert tr.score_best_on_test() == want
