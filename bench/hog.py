"""Throughput of each served model at batch 1, on a quiet machine and beside CPU hogs.

``ncf bench soak --hog N`` runs this instead of the mixed load: for each model, closed-loop
requests from ``concurrency`` HTTP clients for ``seconds`` (after a short warm-up), first with
nothing else running, then with ``N`` busy processes beside the server (each one spins a core).
A model degrades gracefully when it keeps at least ``MIN_KEPT`` of its quiet throughput.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from ncf.bench.entry import BenchError
from ncf.core import names
from ncf.serving.client import IdPool, connect, infer

MIN_KEPT = 0.5  # the share of its quiet throughput that each model must keep beside the hogs
WARMUP_S = 2.0
# model -> outputs requested at batch 1 (the same models ncf serve loads on this CPU server)
OUTPUTS: dict[str, list[str]] = {
    names.MODEL_NEUMF: [names.OUTPUT_SCORE],
    names.MODEL_ENSEMBLE: [names.OUTPUT_SCORE, names.OUTPUT_KNOWN],
    names.MODEL_WORKFLOW: [names.OUTPUT_KNOWN],
    names.MODEL_RECOMMEND: [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES],
}


@contextmanager
def hogs(count: int) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes that each keep one core busy until the block ends."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _client(url, model, pool, until, seed, counts, errors, n) -> None:
    """One closed-loop client; a failed request ends it and is recorded in ``errors`` (a failure
    must fail the bench, never read as a lower throughput)."""
    rng = np.random.default_rng([seed, n])
    conn = connect("http", url)
    warm = time.monotonic() + WARMUP_S
    try:
        while (now := time.monotonic()) < until:
            infer(conn, model, pool.inputs(model, 1, 10, rng), OUTPUTS[model])
            if now >= warm:
                counts[n] += 1
    except Exception as exc:  # noqa: BLE001 (reported by rate, in the main thread)
        errors.append(f"{model}: {type(exc).__name__}: {exc}")
    finally:
        conn[1].close()


def rate(url: str, model: str, pool: IdPool, seconds: float, concurrency: int, seed: int) -> float:
    """Requests/s of ``model`` at batch 1 from ``concurrency`` closed-loop HTTP clients, over
    ``seconds`` after ``WARMUP_S`` of warm-up."""
    counts, errors = [0] * concurrency, []
    until = time.monotonic() + WARMUP_S + seconds
    threads = [
        threading.Thread(target=_client, args=(url, model, pool, until, seed, counts, errors, n))
        for n in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError(f"a request failed while measuring throughput: {errors[0]}")
    return sum(counts) / seconds


def measure(
    url: str, repo, models: list[str], hog_count: int, seconds: float, concurrency: int, seed: int
) -> list[dict]:
    """One row per model: quiet and hogged requests/s, their ratio and whether it kept enough.

    Each model is measured quiet, hogged, quiet, hogged, and each figure is the mean of its two
    phases, so that a drift of the machine over the run weighs on both alike.
    """
    pool = IdPool(repo)
    rows = []
    for m in models:
        quiet, busy = [], []
        for _ in range(2):
            quiet.append(rate(url, m, pool, seconds, concurrency, seed))
            with hogs(hog_count):
                busy.append(rate(url, m, pool, seconds, concurrency, seed))
        q, b = float(np.mean(quiet)), float(np.mean(busy))
        kept = b / q if q else 0.0
        rows.append(
            {
                "model": m,
                "quiet_req_s": round(q, 1),
                "hog_req_s": round(b, 1),
                "kept": round(kept, 3),
                "passed": kept >= MIN_KEPT,
            }
        )
    return rows
