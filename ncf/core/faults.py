"""Deterministic crash injection for the crash tests: ``NCF_FAULT=POINT:N`` kills the process.

With ``NCF_FAULT=atomic_commit:3`` the process sends itself SIGKILL just before its third rename
into place (``ncf.core.atomic``); with ``NCF_FAULT=optimizer_step:5``, just before its fifth optimizer
step (``ncf.models.trainer``). The N-th operation therefore never happens: the state on disk is what a
crash at that moment leaves, chosen by the test instead of by a timer. Unset (production), each
point costs one comparison with ``None``.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "NCF_FAULT"
ATOMIC_COMMIT = "atomic_commit"  # each rename of a finished temp file or directory into place
OPTIMIZER_STEP = "optimizer_step"  # each optimizer update of the training loop
POINTS = (ATOMIC_COMMIT, OPTIMIZER_STEP)


def parse(value: str | None) -> tuple[str, int] | None:
    """``"POINT:N"`` -> ``(POINT, N)``; None for an unset or empty value.

    Raises
    ------
    ValueError
        If the point is unknown or N is not a positive integer.
    """
    if not value:
        return None
    point, _, count = value.partition(":")
    if point not in POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"{ENV}={value!r}: expected POINT:N with POINT one of {', '.join(POINTS)} and N >= 1 "
            f"(e.g. {ATOMIC_COMMIT}:3); unset {ENV} to run without an injected crash"
        )
    return point, int(count)


_PLAN = parse(os.environ.get(ENV))
_seen = 0
_lock = threading.Lock()  # checkpoints are committed from a writer thread


def hit(point: str) -> None:
    """Count one passage through ``point``; SIGKILL this process at the N-th one ``NCF_FAULT`` names."""
    global _seen
    if _PLAN is None:
        return
    if point != _PLAN[0]:
        return
    with _lock:
        _seen += 1
        if _seen == _PLAN[1]:
            os.kill(os.getpid(), signal.SIGKILL)
