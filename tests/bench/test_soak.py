"""``ncf bench soak``'s schedule of aborting requests, its checks, and the CPU hogs of ``--hog``."""

from __future__ import annotations

import pytest

from ncf.bench import hog
from ncf.bench.soak import SoakBench


@pytest.mark.parametrize(
    ("duration", "every", "at"),
    [
        (60.0, 0.0, ()),
        (120.0, 20.0, (20.0, 40.0, 60.0)),  # the last 60 s leave the last restart time
        (90.0, 40.0, ()),  # 30 s of room: no abort fits
        (100.0, 40.0, (40.0,)),
    ],
)
def test_aborts_are_scheduled_before_the_last_minute(duration, every, at):
    assert SoakBench(duration=duration, abort_every=every).abort_at_s() == at


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"abort_every": -1.0, "duration": 120.0}, "--abort-every -1.0"),
        ({"abort_every": 10.0, "duration": 60.0}, "duration > 60 s"),
        ({"concurrency": 0}, "concurrency >= 1"),
    ],
)
def test_bad_settings_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        SoakBench(**fields).check()


def test_hogs_spin_while_the_block_runs_and_are_gone_after():
    with hog.hogs(2) as procs:
        assert all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)


def test_a_failed_request_fails_the_throughput_measure(monkeypatch):
    """No server at the address: the clients' errors end the bench, not a throughput of 0."""
    from ncf.bench.entry import BenchError
    from ncf.core import names

    class Pool:
        def inputs(self, model, batch, k, rng):
            return []

    def refuse(conn, model, inputs, outputs):
        raise ConnectionRefusedError("no server")

    monkeypatch.setattr(hog, "infer", refuse)
    with pytest.raises(BenchError, match="neumf: ConnectionRefusedError: no server"):
        hog.rate("127.0.0.1:9", names.MODEL_NEUMF, Pool(), 0.1, 2, 1)
