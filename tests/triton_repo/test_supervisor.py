"""The service outlives a request that aborts tritonserver: the supervisor restarts it, on the same
ports, after removing the shared memory the dead server left; bounded restarts with back-off."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ncf.core import names
from ncf.serving.load import ABORTING_ROWS, post_ensemble
from ncf.serving.server import TritonServer
from ncf.serving.supervisor import RestartPolicy, Supervisor, exit_cause, remove_stale_shm

# The request that aborts tritonserver 2.51 (docs/FACTS.md): a shape of 2**63 - 1 rows, one element.
HUGE = ABORTING_ROWS
_infer = post_ensemble  # (url, rows, data) -> HTTP status, 0: connection dropped


@pytest.mark.parametrize(
    "restarts, now, kept, delay",
    [
        ([], 0.0, [], 1.0),  # the first restart waits 1 s
        ([0.0, 10.0], 20.0, [0.0, 10.0], 4.0),  # the third waits 4 s
        ([0.0, 1.0, 2.0, 3.0, 4.0], 5.0, [0.0, 1.0, 2.0, 3.0, 4.0], None),  # a sixth death: give up
        ([0.0, 1.0, 2.0, 3.0, 4.0], 600.5, [1.0, 2.0, 3.0, 4.0], 16.0),  # the first left the window
    ],
)
def test_restart_policy(restarts, now, kept, delay):
    assert RestartPolicy().next_restart(restarts, now) == (kept, delay)


@pytest.mark.parametrize(
    "code, log, cause",
    [
        (-6, "terminate called after throwing an instance of 'std::length_error'\n  what():  vector",
         "killed by SIGABRT (signal 6): what():  vector"),
        (1, "I1202 model loaded\nE1202 error: creating server: Invalid argument", "exit code 1: E1202 error: creating server: Invalid argument"),
        (-9, "", "killed by SIGKILL (signal 9)"),
    ],
)  # fmt: skip
def test_exit_cause(code, log, cause):
    assert exit_cause(code, log) == cause


def test_stale_shared_memory_goes_and_held_memory_stays(tmp_path: Path):
    prefix = "triton_python_backend_shm_region_"
    stale, held, other = tmp_path / f"{prefix}a", tmp_path / f"{prefix}b", tmp_path / "other"
    for path in (stale, held, other):
        path.write_bytes(b"x")
    with open(held, "rb"):  # this live process holds it
        assert remove_stale_shm(tmp_path, prefix) == [stale.name]
    assert not stale.exists() and held.exists() and other.exists()


@pytest.mark.triton
@pytest.mark.slow
def test_a_request_that_aborts_the_server_leaves_the_service_up(repo: Path, tmp_path: Path):
    models = [names.MODEL_WORKFLOW, names.MODEL_NEUMF, names.MODEL_ENSEMBLE]
    logged: list[str] = []
    policy = RestartPolicy(backoff_s=(0.5,))
    with TritonServer(repo, models=models, log_path=tmp_path / "server.log") as server:
        supervisor = Supervisor(server, policy, log=logged.append)
        ports = (server.http_url, server.grpc_url)
        assert _infer(server.http_url, 1, [1]) == 200
        ours = _mapped_by_group(server.pid)  # the python backend's regions of this server
        assert ours
        assert _infer(server.http_url, HUGE, [1]) == 0  # the server aborted mid-request
        deadline = time.monotonic() + 30
        while server.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.returncode == -signal.SIGABRT
        assert any(p.exists() for p in ours)  # what the dead server left behind
        t0 = time.monotonic()
        assert supervisor.check()
        assert time.monotonic() - t0 < 60  # ready again within a minute
        assert (server.http_url, server.grpc_url) == ports
        assert _infer(server.http_url, 1, [1]) == 200
        assert not any(p.exists() for p in ours)
    assert any("SIGABRT" in line and "restart 1 of 5" in line for line in logged), logged


def _mapped_by_group(pgid: int | None) -> set[Path]:
    """The /dev/shm files mapped by the processes of process group ``pgid``."""
    out = set()
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or os.getpgid(int(proc.name)) != pgid:
                continue
            maps = (proc / "maps").read_text()
        except (OSError, ProcessLookupError):
            continue
        out |= {Path(line.split()[-1]) for line in maps.splitlines() if "/dev/shm/" in line}
    return out
