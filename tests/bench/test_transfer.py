"""``ncf bench transfer``: the per-candidate summary over data sets, hand-computed."""

from __future__ import annotations

import pytest

from ncf.bench import transfer


def _row(candidate: str, data: str, seed: int, hr: float) -> dict:
    return {"candidate": candidate, "data": data, "seed": seed, "valid_hr@10": hr}


def test_mean_over_seeds_then_data_sets_and_the_mean_rank():
    rows = [
        _row("a", "x", 1, 0.70), _row("a", "x", 2, 0.74), _row("a", "y", 1, 0.50),
        _row("b", "x", 1, 0.71), _row("b", "y", 1, 0.60),
    ]  # fmt: skip
    a, b = transfer.summary_rows(rows, ["a", "b"])
    # a: x 0.72 (mean of its seeds), y 0.50 -> 0.61, rank 1 on x and 2 on y; b: 0.655, 2 and 1
    assert a["mean_valid_hr@10"] == pytest.approx(0.61) and a["mean_rank"] == pytest.approx(1.5)
    assert b["mean_valid_hr@10"] == pytest.approx(0.655) and b["mean_rank"] == pytest.approx(1.5)
    assert a["data"] == b["data"] == "all"


def test_etl_without_validation_is_refused(tmp_path):
    (tmp_path / "etl").mkdir()
    with pytest.raises(ValueError, match="no valid/ split"):
        transfer.TransferBench(etl=[tmp_path / "etl"]).check()
