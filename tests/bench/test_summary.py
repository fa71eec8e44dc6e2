"""The README headline table is computed from the benchmark JSON, never typed."""

from __future__ import annotations

import json

from bench.summary import headline_rows, write_summary


def _write(d, name, payload):
    (d / f"{name}.json").write_text(json.dumps(payload))


def test_headline_from_json(tmp_path):
    _write(
        tmp_path, "etl", {"rows": [{"config": "1 process", "total_s": 12.345, "peak_rss_gb": 2.5}]}
    )
    _write(tmp_path, "train", {"rows": [
        {"procs": 1, "batch": 1048576, "precision": "fp32", "samples_per_s": 100000.0, "peak_rss_gib": 3.25},
        {"procs": 1, "batch": 1048576, "precision": "bf16", "samples_per_s": 200000.0, "peak_rss_gib": 3.0},
    ]})  # fmt: skip
    rows = headline_rows(tmp_path)
    assert rows[0][1] == "12.3 s, 2.50 GB" and "78 s" in rows[0][2]
    assert rows[1][1] == "100,000 samples/s fp32 (3.2 GB), 200,000 bf16"
    text = write_summary(tmp_path).read_text()
    assert text.count("\n| ") == 3  # header + 2 rows


def test_no_results_no_summary(tmp_path):
    assert headline_rows(tmp_path) == [] and write_summary(tmp_path) is None
    assert not (tmp_path / "summary.md").exists()
