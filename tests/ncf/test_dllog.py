"""The DLLogger-compatible writer produces DLE's JSON-lines format."""

from __future__ import annotations

import json

import pytest

from ncf.core.dllog import DLLogger, read_log


@pytest.fixture(autouse=True)
def _own_writer(monkeypatch):
    monkeypatch.setenv("NCF_NO_DLLOGGER", "1")  # test our writer even where dllogger is installed


def test_log_lines_have_dllogger_fields(tmp_path):
    path = tmp_path / "log.json"
    with DLLogger(path, stdout=False) as log:
        log.metadata("hr@10", {"unit": None, "format": ":.5f"})
        log.log("PARAMETER", {"batch_size": 1048576})
        log.log(3, {"hr@10": 0.95, "loss": 0.1})
        log.log((), {"best_accuracy": 0.96})
    lines = path.read_text().splitlines()
    assert all(line.startswith("DLLL {") for line in lines)
    recs = read_log(path)
    assert recs[0]["type"] == "METADATA" and recs[0]["metadata"]["name"] == "hr@10"
    assert [r["step"] for r in recs[1:]] == ["PARAMETER", 3, []]
    assert recs[2]["data"] == {"hr@10": 0.95, "loss": 0.1}
    for r in recs[1:]:
        assert {"timestamp", "datetime", "elapsedtime", "type", "step", "data"} <= set(r)
        json.dumps(r)


def test_disabled_logger_writes_nothing(tmp_path):
    path = tmp_path / "log.json"
    log = DLLogger(path, enabled=False)
    log.log(1, {"x": 1})
    log.close()
    assert not path.exists()
