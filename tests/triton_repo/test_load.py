"""A short bounded mixed load (the long one is `ncf bench`): nothing valid fails, nothing invalid
passes, memory stays flat, and the server answers afterwards."""

from __future__ import annotations

import pytest

from serving.load import run_load

pytestmark = pytest.mark.triton


def test_short_mixed_load(server, repo):
    report = run_load(
        server.http_url,
        server.grpc_url,
        repo,
        server.pid,
        duration_s=10,
        concurrency=16,
        warmup_s=3,
    )
    assert report["failures"] == []
    assert report["valid_failed"] == report["invalid_accepted"] == report["transport_errors"] == 0
    assert report["valid_ok"] > 100 and report["invalid_rejected"] > 20
    kinds = set(report["latency"])
    assert {"neumf_wrong_dtype", "neumf_over_max_batch", "recommend_unknown_user"} <= kinds
    assert abs(report["rss_ratio"] - 1) <= 0.10, report
    assert report["answers_after"] and report["passed"]
