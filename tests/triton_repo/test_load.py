"""The load generator: its shared counters under concurrent updates, and a short bounded mixed
load on a real server (the long one is `ncf bench soak`): nothing valid fails, nothing invalid
passes, memory stays flat, and the server answers afterwards; with a request that aborts the
server mixed in, no valid request is lost but those in flight during the restart."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from ncf.serving.load import LoadStats, Request, classify_failures, outages, run_load
from ncf.serving.server import TritonServer
from ncf.serving.supervisor import RestartPolicy, Supervisor

THREADS, UPDATES = 8, 2_000


def _request(kind: str, valid: bool) -> Request:
    return Request(kind, "neumf", [("user_id", np.zeros((1, 1), np.int64), "INT64")], [], valid)


def _hammer(stats: LoadStats, n: int) -> None:
    """Every kind of update, UPDATES times each, from thread ``n``."""
    ok, bad = _request("ok", True), _request(f"bad{n}", False)
    for i in range(UPDATES):
        stats.add(ok, (0.0, 0.001), None, rejected=False)  # valid_ok
        stats.add(ok, (0.0, 0.001), f"wrong {i}", rejected=False)  # valid_failed
        stats.add(bad, (0.0, 0.002), "rejected", rejected=True)  # invalid_rejected
        stats.add(bad, (0.0, 0.002), None, rejected=False)  # invalid_accepted
        stats.transport_error("connection reset")


def test_every_update_waits_for_the_lock():
    """While the lock is held no update lands; released, every blocked update does."""
    stats = LoadStats()
    updates = [
        lambda: stats.add(_request("ok", True), (0.0, 0.001), None, rejected=False),
        lambda: stats.add(_request("bad", False), (0.0, 0.001), "no", rejected=True),
        lambda: stats.transport_error("reset"),
    ]
    threads = [threading.Thread(target=u) for u in updates]
    with stats.lock:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=0.2)  # a fixed wait: an update that ignores the lock is done by now
        assert all(t.is_alive() for t in threads)
        assert stats.counts == dict.fromkeys(LoadStats.KEYS, 0) and not stats.latency
    for t in threads:
        t.join()
    assert (stats.counts["valid_ok"], stats.counts["invalid_rejected"]) == (1, 1)
    assert stats.counts["transport_errors"] == 1 and stats.failures == ["reset"]


@pytest.mark.triton
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
    answered = sum(k["n"] for k in report["latency"].values())  # one latency per answer
    assert answered == report["requests"] - report["transport_errors"]
    assert report["answers_after"] and report["passed"]


@pytest.mark.parametrize(
    ("aborts", "ready", "end", "down"),
    [
        ([], [5.0], 9.0, []),
        ([2.0], [5.0], 9.0, [(2.0, 5.0)]),
        ([6.0, 2.0], [5.0, 8.0], 9.0, [(2.0, 5.0), (6.0, 8.0)]),
        ([2.0, 6.0], [5.0], 9.0, [(2.0, 5.0), (6.0, 9.0)]),  # not ready again by the end
        ([2.0, 3.0], [5.0], 9.0, [(2.0, 5.0), (3.0, 9.0)]),  # one restart answers one abort
    ],
)
def test_outages_run_from_each_abort_to_the_next_ready(aborts, ready, end, down):
    assert outages(aborts, ready, end) == down


def test_failures_are_told_apart_by_when_they_were_sent():
    down = [(2.0, 5.0)]
    failed = [(1.0, 2.0), (1.5, 6.0), (3.0, 3.1), (5.0, 5.5), (5.5, 6.0), (0.5, 1.9)]
    # in flight at 2.0: (1.0, 2.0), (1.5, 6.0); sent while down: (3.0, 3.1), (5.0, 5.5)
    assert classify_failures(failed, down) == {"in_flight": 2, "while_down": 2, "lost": 2}
    assert classify_failures(failed, [])["lost"] == len(failed)


@pytest.mark.triton
@pytest.mark.slow
def test_mixed_load_with_an_aborting_request_loses_only_what_was_in_flight(
    repo: Path, tmp_path: Path
):
    logged: list[str] = []
    with TritonServer(repo, log_path=tmp_path / "server.log") as server:
        first = server.pid
        supervisor = Supervisor(server, RestartPolicy(backoff_s=(0.5,)), log=logged.append)
        with supervisor.kept_up(0.1):
            report = run_load(
                server.http_url,
                server.grpc_url,
                repo,
                lambda: server.pid,
                duration_s=24,
                concurrency=8,
                warmup_s=2,
                abort_at_s=(4.0,),
                ready_times=supervisor.ready_at,
            )
        assert server.pid != first and len(supervisor.ready_at) == 1, logged
    assert report["aborts"] == report["restarts"] == 1 and report["outage_s"][0] < 60, report
    assert report["abort_statuses"] == [0]  # the server died mid-request
    assert report["valid_lost"] == 0 and report["invalid_accepted"] == 0, report["failures"]
    failed = report["valid_failed"] + report["transport_errors"]
    assert report["lost_in_restart"] <= failed  # invalid ones with no answer are not counted
    assert report["valid_ok"] > 100 and report["answers_after"] and report["passed"], report
    assert any("SIGABRT" in line for line in logged), logged
