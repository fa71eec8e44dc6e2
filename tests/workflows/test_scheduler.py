"""``ncf etl --scheduler``: the ETL on a running Dask cluster gives the one-process output.

The cluster is real: a ``dask scheduler`` process and two ``dask worker`` processes on 127.0.0.1
(the scheduler picks a free port and writes its address to a scheduler file).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from ncf import cli
from ncf.core.names import WORKFLOW_DIR
from ncf.workflows.etl import EtlConfig
from tests.workflows.helpers import REPO, SMALL, etl, metadata, needs_nvtabular
from tests.workflows.test_partitioned import assert_same_output

distributed = pytest.importorskip("distributed")

START_S = 90  # bound on a process start on 2 busy cores (imports take most of it)
STOP_S = 20  # bound on a graceful stop before SIGKILL
# Keys of metadata.json that describe the run, not the output.
RUN_KEYS = {"created", "timings_s", "partitions", "workers", "scheduler"}


def _spawn(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        # Own session: teardown signals the worker's nanny and the process it spawned together.
        return subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, wait a bounded time, then SIGKILL what is left."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_S)


def _scheduler_address(file: Path, proc: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dask scheduler exited ({proc.returncode}): {log.read_text()}")
        try:
            return json.loads(file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)  # the file appears once the scheduler listens (or is half written)
    raise RuntimeError(f"dask scheduler wrote no {file} in {START_S} s: {log.read_text()}")


@contextmanager
def dask_cluster(root: Path, n_workers: int) -> Iterator[str]:
    """A scheduler and ``n_workers`` single-threaded workers on 127.0.0.1; yields the address.

    The workers run in their own directory, so a relative path given to them would not resolve.
    """
    root.mkdir(parents=True, exist_ok=True)
    file = root / "scheduler.json"
    procs = []
    try:
        log = root / "scheduler.log"
        scheduler = ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0"]
        procs.append(
            _spawn([*scheduler, "--no-dashboard", "--scheduler-file", str(file)], root, log)
        )
        address = _scheduler_address(file, procs[0], log)
        for i in range(n_workers):
            wdir = root / f"worker{i}"
            wdir.mkdir()
            worker = ["distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1"]
            # --death-timeout: a worker whose scheduler is gone exits even if teardown missed it.
            flags = ["--host", "127.0.0.1", "--no-dashboard", "--death-timeout", "60"]
            local = ["--local-directory", str(wdir)]
            procs.append(_spawn([*worker, *flags, *local], wdir, root / f"worker{i}.log"))
        yield address
    finally:
        _stop(procs[::-1])  # workers first: a worker losing its scheduler retries, then waits


@contextmanager
def client_of(address: str, n_workers: int) -> Iterator[distributed.Client]:
    client = distributed.Client(address, timeout=10, set_as_default=False)
    try:
        client.wait_for_workers(n_workers, timeout=START_S)
        yield client
    finally:
        client.close()


def executed(client: distributed.Client) -> dict[str, int]:
    """Tasks each worker has run so far."""
    return client.run(lambda dask_worker: dask_worker.state.executed_count)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    with dask_cluster(tmp_path_factory.mktemp("dask"), n_workers=2) as address:
        with client_of(address, 2):
            pass  # both workers have joined
        yield address


def free_port() -> int:
    """A port nothing listens on (bound and released: refused when connected to)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_nvtabular
@pytest.mark.distributed
@pytest.mark.slow
def test_etl_on_a_running_cluster_equals_one_process(cluster, tmp_path):
    one = tmp_path / "one"
    etl(SMALL, one, seed=1)
    with client_of(cluster, 2) as client:
        before = executed(client)
        # A subprocess as a user runs it, from another directory than the workers', --out relative.
        run = subprocess.run(
            [sys.executable, "-m", "ncf.cli", "etl", "--input", str(SMALL), "--out", "two"]
            + ["--seed", "1", "--scheduler", cluster, "--partitions", "3"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        after = executed(client)
    ran = sum(after.values()) - sum(before.values())
    assert ran > 0, f"the cluster's workers ran no task ({before} -> {after})"
    two = tmp_path / "two"
    assert_same_output(one, two)  # partitioned on the cluster's workers: the in-memory output
    for vocab in ("unique.userId.parquet", "unique.movieId.parquet"):
        path = f"{WORKFLOW_DIR}/categories/{vocab}"
        pd.testing.assert_frame_equal(pd.read_parquet(two / path), pd.read_parquet(one / path))
    m1, m2 = metadata(one), metadata(two)
    assert (m2["scheduler"], m2["workers"], m2["partitions"]) == (cluster, 2, 3)
    assert (m1["scheduler"], m1["workers"]) == (None, 1)
    assert {k: v for k, v in m2.items() if k not in RUN_KEYS} == {
        k: v for k, v in m1.items() if k not in RUN_KEYS
    }
    # The cluster is not ours: ncf etl left the scheduler and both workers running.
    with client_of(cluster, 2):
        pass


@pytest.mark.distributed
def test_workers_that_do_not_see_the_output_directory_are_named(cluster, tmp_path):
    from ncf.workflows.workflow import check_workers_see

    missing = tmp_path / "not-mounted-on-the-workers"
    with client_of(cluster, 2) as client:
        workers = list(client.scheduler_info()["workers"])
        check_workers_see(client, tmp_path)  # exists: seen by every worker on this host
        with pytest.raises(ValueError) as err:
            check_workers_see(client, missing)
    assert str(missing) in str(err.value)
    assert len(workers) == 2 and all(worker in str(err.value) for worker in workers)


@needs_nvtabular
def test_unreachable_scheduler_fails_fast_naming_address_and_fix(tmp_path, capsys):
    address = f"tcp://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    code = cli.main(
        ["etl", "--input", str(SMALL), "--out", str(tmp_path / "out"), "--scheduler", address]
    )
    seconds = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"cannot reach the Dask scheduler at {address} within 5 s" in err
    assert "dask scheduler" in err and "DASK_SCHEDULER_ADDRESS" in err
    assert seconds < 30, f"took {seconds:.1f} s to give up"
    assert not (tmp_path / "out").exists()


@pytest.mark.distributed
def test_scheduler_without_workers_is_reported(tmp_path):
    from ncf.workflows.workflow import connect

    with dask_cluster(tmp_path / "dask", n_workers=0) as address:
        with pytest.raises(ValueError, match=f"scheduler at {address} has no worker after 1 s"):
            connect(address, workers_wait_s=1)


def _parsed(*argv: str):
    from ncf.core.config import resolve
    from ncf.workflows import cli as etl_cli

    argv = ["--input", "r.csv", "--out", "o", *argv]
    return etl_cli, resolve(etl_cli.CONFIG, argv, "etl")


def test_scheduler_flag_wins_over_the_environment_variable(monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://from-env:8786")
    etl_cli, args = _parsed("--scheduler", "tcp://from-flag:8786")
    assert etl_cli.resolve_scheduler(args) == "tcp://from-flag:8786"
    assert etl_cli.resolve_scheduler(_parsed()[1]) == "tcp://from-env:8786"
    # The variable does not apply where no cluster can be used or a local one was asked for.
    assert etl_cli.resolve_scheduler(_parsed("--engine", "pandas")[1]) is None
    assert etl_cli.resolve_scheduler(_parsed("--workers", "2")[1]) is None
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    assert etl_cli.resolve_scheduler(_parsed()[1]) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "pandas"}, "use --engine nvtabular"),
        pytest.param({"workers": 2}, "pass only one of them", marks=needs_nvtabular),
    ],
)
def test_scheduler_with_options_it_cannot_combine_with(options, message):
    opts = EtlConfig(input=SMALL, out=Path("o"), scheduler="tcp://127.0.0.1:8786", **options)
    with pytest.raises(ValueError, match=message):
        opts.check()
