"""`python -m ncf.bench.train --preset-check`: real `ncf train` runs per seed, the model and its MF
baseline on a validation split, averaged over the seeds."""

from __future__ import annotations

import pytest

from ncf.bench.train_preset import check_preset, summarize
from ncf.models.selection import VALID_PROTOCOL
from tests.models.etl_data import planted_ratings
from tests.models.valid_split import write_valid_etl_dir

FAST = ["--epochs", "2", "-b", "256", "--eval-batch-size", "4096", "--threads", "1"]


def test_summarize_mean_and_range_skip_missing_columns():
    rows = [{"hr@10": 0.5, "mf_hr@10": None}, {"hr@10": 0.7, "mf_hr@10": None}]
    summary = summarize(rows)
    assert summary == {"hr@10": {"mean": pytest.approx(0.6), "min": 0.5, "max": 0.7}}


def test_preset_check_with_mf_baseline_on_a_valid_split(tmp_path):
    etl = write_valid_etl_dir(planted_ratings(), tmp_path / "etl")
    results = check_preset(
        etl, "small", [1, 2], "check", tmp_path / "results", extra=FAST, baseline="mf-small"
    )
    seeds, mean, spread = results.rows[:2], results.rows[2], results.rows[3]
    for row in seeds:
        assert row["protocol"] == VALID_PROTOCOL
        assert 0 <= row["valid_hr@10"] <= 1 and 0 <= row["hr@10"] <= 1
        assert 0 <= row["mf_hr@10"] <= 1 and row["mf_best_epoch"] in (0, 1)
    assert mean["hr@10"] == pytest.approx((seeds[0]["hr@10"] + seeds[1]["hr@10"]) / 2)
    assert mean["mf_hr@10"] == pytest.approx((seeds[0]["mf_hr@10"] + seeds[1]["mf_hr@10"]) / 2)
    assert spread["seed"] == "range" and "-" in spread["mf_hr@10"]
