"""The README headline table is computed from the benchmark JSON, never typed."""

from __future__ import annotations

import json

from ncf.bench.summary import SMALL_RESULTS, headline_rows, write_summary


def _write(d, name, payload):
    (d / f"{name}.json").write_text(json.dumps(payload))


def test_headline_from_json(tmp_path):
    _write(tmp_path, "etl", {"rows": [
        {"config": "1 process, in memory", "total_s": 12.345, "peak_rss_gb": 2.5},
        {"config": "DLE convert.py", "total_s": 70.91, "peak_rss_gb": 4.25},
    ]})  # fmt: skip
    _write(tmp_path, "train", {"rows": [
        {"procs": 1, "batch": 1048576, "precision": "fp32", "samples_per_s": 100000.0, "peak_rss_gib": 3.25},
        {"procs": 1, "batch": 1048576, "precision": "bf16", "samples_per_s": 200000.0, "peak_rss_gib": 3.0},
    ]})  # fmt: skip
    rows = headline_rows(tmp_path)
    assert rows[0][1:3] == ("12.3 s, 2.50 GB", "70.9 s, 4.25 GB peak RSS")  # measured, same run
    assert rows[1][1:3] == ("100,000 samples/s fp32 (3.2 GB), 200,000 bf16", "not run")
    text = write_summary(tmp_path).read_text()
    assert text.count("\n| ") == 3  # header + 2 rows


def test_cpu_training_row_is_a_ratio_to_dle_s_step_of_the_same_run(tmp_path):
    _write(tmp_path, "train", {"rows": [
        {"procs": 1, "batch": 1048576, "precision": "dle", "samples_per_s": 50000.0, "peak_rss_gib": 9.5},
        {"procs": 1, "batch": 1048576, "precision": "fp32", "samples_per_s": 210000.0, "peak_rss_gib": 3.25},
        {"procs": 1, "batch": 1048576, "precision": "bf16", "samples_per_s": 400000.0, "peak_rss_gib": 3.0},
    ]})  # fmt: skip
    (row,) = headline_rows(tmp_path)
    assert row[1:3] == (
        "210,000 samples/s fp32 (3.2 GB, 4.2x), 400,000 bf16 (8.0x)",
        "50,000 samples/s, 9.5 GB",
    )


def test_no_results_no_summary(tmp_path):
    assert headline_rows(tmp_path) == [] and write_summary(tmp_path) is None
    assert not (tmp_path / "summary.md").exists()


def test_small_row_names_the_protocol_and_the_mf_baseline(tmp_path):
    spread = {"mean": 0.72, "min": 0.71, "max": 0.73}
    _write(tmp_path, SMALL_RESULTS, {
        "rows": [{"seed": 1, "protocol": "valid-selected", "itempop_hr@10": 0.604, "itempop_ndcg@10": 0.355},
                 {"seed": 2}, {"seed": "mean"}, {"seed": "range"}],
        "summary": {"hr@10": spread, "ndcg@10": {"mean": 0.48}, "mf_hr@10": {**spread, "mean": 0.715}},
    })  # fmt: skip
    ((what, ours, *_),) = headline_rows(tmp_path)
    assert what == "ml-latest-small, 100 negatives, `--preset small` (2 seeds, valid-selected)"
    assert ours == (
        "HR@10 0.720 (0.710-0.730), NDCG@10 0.480; MF 0.715 (0.710-0.730); ItemPop 0.604 / 0.355"
    )


def test_recbole_is_quoted_only_as_the_harness_measured_it(tmp_path):
    spread = {"mean": 0.72, "min": 0.71, "max": 0.73}
    doc = {"rows": [{"seed": 1, "itempop_hr@10": 0.6, "itempop_ndcg@10": 0.35}, {"seed": "mean"},
                    {"seed": "range"}], "summary": {"hr@10": spread, "ndcg@10": {"mean": 0.48}}}  # fmt: skip
    _write(tmp_path, SMALL_RESULTS, doc)
    ((*_, reference, source),) = headline_rows(tmp_path)
    assert reference == "not measured on this split" and "--peers" in source
    doc["summary"]["recbole_hr@10"] = {"mean": 0.7, "min": 0.69, "max": 0.71}
    doc["versus_recbole"] = {"diff": 0.02, "lo": -0.001, "hi": 0.041, "p": 0.06}
    _write(tmp_path, SMALL_RESULTS, doc)
    ((*_, reference, source),) = headline_rows(tmp_path)
    assert reference == "HR@10 0.700 (0.690-0.710); ours - RecBole +0.020 [-0.001, +0.041]"
    assert source.startswith("RecBole 1.2.1 NeuMF (`ncf bench peers`)")
