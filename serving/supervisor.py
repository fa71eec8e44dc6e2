"""Keep tritonserver up: restart it when it dies, with back-off and a bound, and clean what it left.

One malformed request can abort tritonserver itself (docs/FACTS.md, "Triton 2.51 aborts on an
input shape of 2**63 - 1"); the service must outlive it. ``Supervisor.check()`` is called in the
serving loop: while the server runs it does nothing; when the server has died it logs the exit
cause, removes the python backend's shared-memory regions that no live process holds any more,
and restarts the server on the same ports after a back-off. While the server is down its ready
endpoint does not answer, so readiness probes (``/v2/health/ready``) report false. More than
``max_restarts`` deaths within ``window_s`` seconds mean something is wrong beyond one request:
the supervisor gives up and the caller exits non-zero.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ncf.serving.server import TritonServer

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "triton_python_backend_shm_region_"  # the python backend's region names


@dataclass(frozen=True)
class RestartPolicy:
    """How often a dead server is restarted, and after how long a wait."""

    max_restarts: int = 5  # restarts allowed within window_s; one more death gives up
    window_s: float = 600.0  # the sliding window the restarts are counted in
    backoff_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)  # wait before the n-th restart

    def next_restart(self, restarts: list[float], now: float) -> tuple[list[float], float | None]:
        """The restarts still inside the window at ``now``, and the wait before the next restart
        (None: give up).

        Parameters
        ----------
        restarts
            Clock times of the earlier restarts.
        now
            Clock time of the death.
        """
        recent = [t for t in restarts if now - t < self.window_s]
        if len(recent) >= self.max_restarts:
            return recent, None
        return recent, self.backoff_s[min(len(recent), len(self.backoff_s) - 1)]


def exit_cause(code: int | None, log_tail: str) -> str:
    """A one-line cause of death: the signal or exit code, and the log's last error line."""
    if code is None:
        what = "still running"
    elif code < 0:
        what = f"killed by {signal.Signals(-code).name} (signal {-code})"
    else:
        what = f"exit code {code}"
    markers = ("terminate called", "what():", "error", "Error", "Signal (")
    lines = [ln.strip() for ln in log_tail.splitlines() if any(m in ln for m in markers)]
    return f"{what}: {lines[-1][:200]}" if lines else what


def _held_paths() -> set[str]:
    """Every path a live process maps or holds open (read from /proc)."""
    held: set[str] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                held.update(
                    line.split(maxsplit=5)[-1].strip() for line in maps if "/dev/shm/" in line
                )
            for fd in os.listdir(f"/proc/{pid}/fd"):
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue  # a process that exited meanwhile, or one we may not read
    return held


def remove_stale_shm(shm_dir: Path = SHM_DIR, prefix: str = SHM_PREFIX) -> list[str]:
    """Remove the python backend's shared-memory regions that no live process maps or holds.

    A region of a running server (this one's or another's) is always mapped by it, so only the
    regions of dead servers go. Returns the names removed.
    """
    if not shm_dir.is_dir():
        return []
    candidates = [p for p in shm_dir.glob(prefix + "*") if p.is_file()]
    if not candidates:
        return []
    held = _held_paths()
    removed = []
    for path in candidates:
        if str(path) not in held:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def _log(message: str) -> None:
    print(f"ncf serve: {message}", file=sys.stderr, flush=True)


@dataclass
class Supervisor:
    """Restarts ``server`` when it has died (see the module docstring)."""

    server: TritonServer
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    log: Callable[[str], None] = _log
    clock: Callable[[], float] = time.monotonic
    wait: Callable[[float], bool] = time.sleep  # returns True to abandon the restart (stop asked)
    restarts: list[float] = field(default_factory=list)  # clock() of each restart in the window
    ready_at: list[float] = field(default_factory=list)  # clock() each time it was ready again

    def check(self) -> bool:
        """Restart the server if it died; False once the policy gives up (or a stop was asked).

        A restart that fails (the new server exits or is not ready in time) counts as one more
        death: it is stopped and restarted again, within the same policy.
        """
        while not self.server.running():
            restarted = self._restart()
            if restarted is not None:
                return restarted
        return True

    def _restart(self) -> bool | None:
        """One restart of a dead server: True when up, False to give up, None when it failed."""
        cause = exit_cause(self.server.returncode, self.server.log_tail())
        self.server.reap()  # its stubs hold the shared memory until they are gone
        removed = remove_stale_shm()
        self.restarts, delay = self.policy.next_restart(self.restarts, self.clock())
        if delay is None:
            self.log(
                f"tritonserver died ({cause}); {len(self.restarts)} restarts in the last "
                f"{self.policy.window_s:.0f} s: giving up (log {self.server.log_path})"
            )
            return False
        self.log(
            f"tritonserver died ({cause}); removed {len(removed)} stale shared-memory regions; "
            f"restart {len(self.restarts) + 1} of {self.policy.max_restarts} in {delay:g} s"
        )
        if self.wait(delay):
            return False
        self.restarts.append(self.clock())
        try:
            self.server.restart()
        except RuntimeError as exc:  # the new server died or hung while loading
            self.log(f"restart failed: {str(exc).splitlines()[0]}")
            self.server.reap()
            return None
        self.ready_at.append(self.clock())
        self.log(f"tritonserver ready again (pid {self.server.pid})")
        return True

    @contextlib.contextmanager
    def kept_up(self, interval_s: float = 0.5) -> Iterator[Supervisor]:
        """Run ``keep_up`` in a thread for the block (stopped and joined at its end)."""
        stop = threading.Event()
        keeper = threading.Thread(target=self.keep_up, args=(stop, interval_s), daemon=True)
        keeper.start()
        try:
            yield self
        finally:
            stop.set()
            keeper.join()

    def keep_up(
        self,
        stop: threading.Event,
        interval_s: float = 0.5,
        on_restart: Callable[[], None] | None = None,
    ) -> bool:
        """Check the server every ``interval_s`` until ``stop`` is set (True) or the restart
        policy gives up (False); ``on_restart`` is called each time a new server is ready."""
        pid = self.server.pid
        while not stop.wait(interval_s):
            if not self.check():
                return stop.is_set()  # a stop asked during the back-off is a clean stop
            if self.server.pid != pid:
                pid = self.server.pid
                if on_restart is not None:
                    on_restart()
        return True
