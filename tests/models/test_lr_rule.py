"""The learning-rate rule (TrainConfig.lr_at): hand-computed values, applied by the trainer at every
optimizer step, and continued by a resumed run without state of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ncf.models import checkpoint, train
from ncf.models.presets import TrainConfig
from ncf.models.trainer import METRICS_FILE
from tests.models.conftest import FAST, parse


@pytest.mark.parametrize(
    ("batch", "lr_batch", "warmup", "step", "steps", "expected"),
    [
        (4096, 0, 0.0, 0, 10, 0.002),  # no rule: --lr as given
        (4096, 1024, 0.0, 7, 10, 0.004),  # 4x the batch: sqrt(4) = 2x the lr
        (256, 1024, 0.0, 0, 10, 0.001),  # a quarter of the batch: half the lr
        (4096, 1024, 1.0, 0, 10, 0.0004),  # first of 10 warm-up steps: 1/10 of 0.004
        (4096, 1024, 1.0, 4, 10, 0.002),  # fifth: 5/10
        (4096, 1024, 1.0, 9, 10, 0.004),  # tenth: the full lr
        (4096, 1024, 0.5, 12, 10, 0.004),  # past a half-epoch warm-up
        (4096, 0, 2.0, 4, 5, 0.001),  # step 5 of a 2-epoch (10-step) warm-up: 5/10 of 0.002
    ],
)
def test_lr_at_by_hand(batch, lr_batch, warmup, step, steps, expected):
    cfg = TrainConfig(batch_size=batch, lr=0.002, lr_batch=lr_batch, warmup_epochs=warmup)
    torch.testing.assert_close(cfg.lr_at(step, steps), expected, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [("lr_batch", -1, "--lr-batch -1"), ("warmup_epochs", -0.5, "--warmup-epochs -0.5")],
)
def test_bad_settings_are_refused(field, value, fragment):
    cfg = TrainConfig(**{field: value})
    with pytest.raises(ValueError, match=fragment):
        cfg.check()


def _train(etl: Path, out: Path, *extra) -> dict:
    assert train.run(parse(train, ["--data", etl, "--out", out, *FAST, *extra])) == 0
    return json.loads((out / METRICS_FILE).read_text())


RULE = ("--lr-batch", "64", "--warmup-epochs", "1.5", "--deterministic")


def test_the_trainer_follows_the_rule_and_a_resume_continues_it(etl_dir: Path, tmp_path: Path):
    straight = _train(etl_dir, tmp_path / "straight", "--epochs", 3, *RULE)
    state = torch.load(tmp_path / "straight" / checkpoint.LAST, weights_only=True)
    # FAST: batch 256, lr 0.01; --lr-batch 64: 2x the lr once the 1.5-epoch warm-up is over.
    lrs = [g["lr"] for g in state["optimizer"]["param_groups"]]
    torch.testing.assert_close(lrs, [0.02] * len(lrs), rtol=1e-12, atol=0.0)
    plain = _train(etl_dir, tmp_path / "plain", "--epochs", 1, "--deterministic")
    assert straight["history"][0]["loss"] != plain["history"][0]["loss"]  # the warm-up ran
    _train(etl_dir, tmp_path / "resumed", "--epochs", 1, *RULE)  # stopped inside the warm-up
    resumed = _train(etl_dir, tmp_path / "resumed", "--epochs", 3, *RULE, "--resume")
    keys = ("epoch", "loss", "hr@10")
    assert [[h[k] for k in keys] for h in resumed["history"]] == [
        [h[k] for k in keys] for h in straight["history"]
    ]
