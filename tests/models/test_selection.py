"""The kept epoch, the stop rule and DLE's summary on hand-made epoch records."""

from __future__ import annotations

import pytest

from ncf.models.presets import TrainConfig
from ncf.models.selection import (
    DLE_PROTOCOL,
    VALID_PROTOCOL,
    best_index,
    metric_keys,
    protocol,
    selection_key,
    should_stop,
    summarize,
)


def _history(*pairs: tuple[float, float], valid: bool = True) -> list[dict]:
    p = "valid_" if valid else ""
    return [{"epoch": e, f"{p}hr@10": h, f"{p}ndcg@10": n} for e, (h, n) in enumerate(pairs)]


def test_selection_rule_and_stop_rule_on_hand_made_histories():
    # HR ties are broken by NDCG, then by the earlier epoch; the DLE rule looks at HR alone.
    h = _history((0.5, 0.3), (0.6, 0.2), (0.6, 0.4), (0.6, 0.4), (0.55, 0.9))
    assert best_index(h, True, 10) == 2
    assert (
        best_index(
            _history(*[(x["valid_hr@10"], x["valid_ndcg@10"]) for x in h], valid=False), False, 10
        )
        == 1
    )
    cfg = TrainConfig(patience=2)
    assert should_stop(h, cfg, True)  # epochs 3 and 4 did not beat epoch 2
    assert not should_stop(h[:4], cfg, True)
    assert not should_stop(h, TrainConfig(patience=0), True)  # 0 = off
    assert should_stop(h, TrainConfig(threshold=0.6), True)


@pytest.mark.parametrize(
    ("min_epochs", "epochs_run", "stops"),
    # the best is epoch 0; epochs 1-3 are a plateau below it (patience 3)
    [(0, 4, True), (4, 4, True), (5, 4, False), (5, 5, True), (10, 9, False), (10, 10, True)],
)
def test_min_epochs_holds_patience_back(min_epochs: int, epochs_run: int, stops: bool):
    h = _history(*[(0.5, 0.3)] + [(0.4, 0.2)] * 9)[:epochs_run]
    cfg = TrainConfig(patience=3, min_epochs=min_epochs)
    assert should_stop(h, cfg, True) is stops
    # the threshold still stops at once; patience 0 is still off
    assert should_stop(h, TrainConfig(patience=3, min_epochs=min_epochs, threshold=0.5), True)
    assert not should_stop(h, TrainConfig(patience=0, min_epochs=min_epochs), True)


@pytest.mark.parametrize(
    ("threshold", "stops"),
    [(1.0, True), (2.0, False)],  # the default stops a perfect HR@K; above 1 never stops
)
def test_threshold_at_a_perfect_hr(threshold: float, stops: bool):
    h = _history((0.9, 0.5), (1.0, 0.8))
    assert should_stop(h, TrainConfig(threshold=threshold), True) is stops
    assert not should_stop(h[:1], TrainConfig(threshold=threshold), True)


def test_keys_and_protocols():
    assert metric_keys(True, 5) == ("valid_hr@5", "valid_ndcg@5")
    assert metric_keys(False, 10) == ("hr@10", "ndcg@10")
    assert selection_key({"hr@10": 0.5, "ndcg@10": 0.1}, False, 10) == (0.5,)
    assert (protocol(True), protocol(False)) == (VALID_PROTOCOL, DLE_PROTOCOL)


def test_summary_of_a_valid_run_names_its_figures_valid():
    h = _history((0.5, 0.3), (0.7, 0.4), (0.6, 0.5))
    for i, rec in enumerate(h):
        rec.update(loss=1.0 - i / 10, train_throughput=10.0 * (i + 1), eval_throughput=5.0,
                   elapsed=float(i + 1))  # fmt: skip
    s = summarize(h, threshold=0.65, k=10)
    assert (s["best_epoch"], s["best_valid_hr@10"], s["best_valid_ndcg@10"]) == (1, 0.7, 0.4)
    assert "best_accuracy" not in s and s["time_to_target"] == 2.0 and s["epochs_run"] == 3
    assert s["mean_train_throughput"] == pytest.approx(20.0) and s["train_loss"] == 0.8
    assert summarize([], 1.0, 10) == {"epochs_run": 0}


def test_a_negative_min_epochs_is_named():
    with pytest.raises(ValueError, match="--min-epochs -1: must be >= 0"):
        TrainConfig(min_epochs=-1).check()
