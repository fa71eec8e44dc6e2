"""`ncf serve` outlives a request that aborts tritonserver: it restarts the server on the same
ports, logs the cause, prints its status line again, and gives up (exit 1) only as the policy says."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

from ncf.core import names
from ncf.serving.supervisor import RestartPolicy, Supervisor
from tests.triton_repo.test_supervisor import HUGE, _infer


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _next_line(lines: queue.Queue, timeout: float) -> str | None:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return None


@pytest.mark.triton
@pytest.mark.slow
def test_ncf_serve_restarts_a_server_that_a_request_aborted(repo, tmp_path):
    models = [names.MODEL_WORKFLOW, names.MODEL_NEUMF, names.MODEL_ENSEMBLE]
    cmd = [sys.executable, "-m", "ncf.cli", "serve", "--repo", str(repo), "--models", *models]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    cmd += ["--log-file", str(tmp_path / "server.log")]
    err = tmp_path / "stderr.txt"
    with (
        open(err, "w") as stderr,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True) as proc,
    ):
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
        try:
            first = json.loads(_next_line(lines, 120) or "{}")
            assert first.get("ready"), err.read_text()
            url = first["http"]
            assert _infer(url, 1, [1]) == 200
            assert _infer(url, HUGE, [1]) == 0  # the server aborts mid-request
            t0 = time.monotonic()
            again = json.loads(_next_line(lines, 60) or "{}")  # printed once it is ready again
            assert again.get("ready") and again["pid"] != first["pid"]
            assert (again["http"], again["grpc"]) == (first["http"], first["grpc"])
            assert _infer(url, 1, [1]) == 200
            assert time.monotonic() - t0 < 60
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    log = err.read_text()
    assert "SIGABRT" in log and "restart 1 of 5" in log and "ready again" in log, log


@dataclass
class FakeServer:
    """Dies on demand; ``restart`` fails ``failures`` times before it comes up."""

    failures: int = 0
    up: bool = False
    pid: int = 1
    returncode: int | None = -6
    log_path: str = "log"
    calls: list[str] = field(default_factory=list)

    def running(self) -> bool:
        return self.up

    def log_tail(self) -> str:
        return "terminate called after throwing an instance of 'std::length_error'"

    def reap(self) -> None:
        self.calls.append("reap")

    def restart(self) -> None:
        self.calls.append("restart")
        if self.failures:
            self.failures -= 1
            raise RuntimeError("tritonserver exited with code 1 before it was ready\nlog...")
        self.up, self.pid = True, self.pid + 1


def test_a_failed_restart_counts_as_a_death_and_is_retried(monkeypatch):
    monkeypatch.setattr("ncf.serving.supervisor.remove_stale_shm", lambda: [])
    logged: list[str] = []
    server = FakeServer(failures=2)
    sup = Supervisor(server, RestartPolicy(max_restarts=3), log=logged.append, wait=lambda s: False)
    assert sup.check() and server.up and server.calls.count("restart") == 3
    assert sum("restart failed" in line for line in logged) == 2
    server.up, server.failures = False, 5  # one death more than the policy allows
    assert not sup.check()
    assert "giving up" in logged[-1]


def test_serve_exits_non_zero_when_the_policy_gives_up(monkeypatch, capsys):
    monkeypatch.setattr("ncf.serving.supervisor.remove_stale_shm", lambda: [])
    server = FakeServer(failures=10)
    sup = Supervisor(server, RestartPolicy(max_restarts=2), log=print, wait=lambda s: False)
    assert sup.keep_up(threading.Event(), interval_s=0.01) is False
    assert "giving up" in capsys.readouterr().out


def test_keep_up_reports_each_restart_once_the_new_server_is_ready(monkeypatch):
    monkeypatch.setattr("ncf.serving.supervisor.remove_stale_shm", lambda: [])
    server, stop = FakeServer(), threading.Event()
    clock = iter([10.0, 11.0, 12.0, 13.0])
    sup = Supervisor(server, log=lambda m: None, wait=lambda s: False, clock=lambda: next(clock))
    orig_restart = server.restart
    server.restart = lambda: (orig_restart(), stop.set())  # type: ignore[method-assign]
    reported: list[int] = []
    assert sup.keep_up(stop, interval_s=0.01, on_restart=lambda: reported.append(server.pid))
    assert reported == [2] and sup.ready_at == [12.0]  # after the restart began (11.0)
