"""A bounded mixed load on a running tritonserver: valid and invalid requests, HTTP and gRPC.

``run_load`` sends, from ``concurrency`` threads for ``duration_s`` seconds, a random mix of valid
requests (NeuMF batches, the ensemble, the workflow, top-K) and invalid ones (unknown or
out-of-range ids, wrong dtype, wrong shape, a batch over max_batch_size, k <= 0). It reports
whether every valid request succeeded, every invalid one was rejected, how the server's memory
moved after warm-up, and whether the server still answers afterwards. The test runs ~10 s of it;
``ncf bench`` runs the long version.

With ``abort_at_s`` it also sends, at those seconds, the one request known to abort tritonserver
(``send_aborting_request``) to a server that ``ncf.serving.supervisor.Supervisor`` keeps up. Each
outage runs from the aborting request to the supervisor's "ready again"; a valid request that
fails or gets no answer is counted as in flight when the server died (``in_flight_at_abort``), as
sent while it was down (``sent_while_down``; clients retry after ``RECONNECT_PAUSE_S``), or else
as lost (``valid_lost``: must be 0).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncf.core import names
from ncf.serving.client import Connection, IdPool, Inputs, connect, infer
from ncf.serving.server import server_rss_bytes


@dataclass
class Request:
    kind: str
    model: str
    inputs: Inputs
    outputs: list[str]
    valid: bool


Built = tuple[str, Inputs, list[str]]  # (model, inputs, outputs)


class RequestMaker:
    """Builds random requests from the ids in an exported repository (``ncf.serving.client.IdPool``)."""

    def __init__(self, repo: str | Path, max_batch_size: int):
        self.pool = pool = IdPool(repo)
        self.max_batch = max_batch_size
        unknown_user = int(pool.raw_users.max()) + 1
        self.valid_kinds: dict[str, Callable[[np.random.Generator], Built]] = {
            "neumf_b1": lambda r: self._neumf(r, 1),
            "neumf_b256": lambda r: self._neumf(r, 256),
            "ensemble_b64": lambda r: self._raw(r, names.MODEL_ENSEMBLE, 64),
            "workflow_b64": lambda r: self._raw(r, names.MODEL_WORKFLOW, 64),
            "recommend_k10": lambda r: self._recommend(int(r.choice(pool.raw_users)), 10),
            # cold start: answered from the popularity ranking (known = false), not an error
            "recommend_unknown_user": lambda r: self._recommend(unknown_user, 10),
        }
        self.invalid_kinds: dict[str, Callable[[np.random.Generator], Built]] = {
            "neumf_out_of_range_id": lambda r: self._neumf(r, 8, user=pool.num_users),
            "neumf_wrong_dtype": lambda r: self._neumf(r, 8, dtype="INT32"),
            "neumf_wrong_shape": lambda r: self._neumf(r, 8, width=2),
            "neumf_over_max_batch": lambda r: self._neumf(r, self.max_batch + 1),
            "recommend_k0": lambda r: self._recommend(int(pool.raw_users[0]), 0),
        }

    def _neumf(self, rng, b, user=None, dtype="INT64", width=1) -> Built:
        u, i = self.pool.model_ids(rng, b, width)
        if user is not None:
            u = np.full_like(u, user)
        np_dtype = np.int64 if dtype == "INT64" else np.int32
        inputs = [
            (names.INPUT_USER, u.astype(np_dtype), dtype),
            (names.INPUT_ITEM, i.astype(np_dtype), dtype),
        ]
        return names.MODEL_NEUMF, inputs, [names.OUTPUT_SCORE]

    def _raw(self, rng, model, b) -> Built:
        u, i = self.pool.raw_ids(rng, b)
        # an unseen movie: flagged known=false, not an error
        i[0, 0] = self.pool.raw_items.max() + 1
        extra = [names.OUTPUT_SCORE] if model == names.MODEL_ENSEMBLE else []
        inputs = [(names.INPUT_RAW_USER, u, "INT64"), (names.INPUT_RAW_ITEM, i, "INT64")]
        return model, inputs, [names.OUTPUT_KNOWN, *extra]

    def _recommend(self, raw_user, k) -> Built:
        inputs = IdPool.recommend_inputs(raw_user, k)
        return names.MODEL_RECOMMEND, inputs, [names.OUTPUT_RAW_ITEMS, names.OUTPUT_SCORES]

    def make(self, rng: np.random.Generator, invalid_fraction: float) -> Request:
        """A random request: one of the invalid kinds with probability ``invalid_fraction``."""
        valid = rng.random() >= invalid_fraction
        kinds = self.valid_kinds if valid else self.invalid_kinds
        kind = list(kinds)[rng.integers(len(kinds))]
        return Request(kind, *kinds[kind](rng), valid=valid)


# The request that aborts tritonserver 2.51 (docs/FACTS.md): a declared shape of 2**63 - 1 rows.
ABORTING_ROWS = 2**63 - 1


def post_ensemble(http_url: str, rows: int, data: list[int], timeout: float = 30.0) -> int:
    """POST a JSON request to the ``ncf`` ensemble declaring ``[rows, 1]`` raw user and item ids
    holding ``data`` (a declared shape may disagree with the data: that is what is tested).

    Returns
    -------
    int
        The HTTP status; 0 when the connection dropped (the server died).
    """
    body = {
        "inputs": [
            {"name": name, "shape": [rows, 1], "datatype": "INT64", "data": data}
            for name in (names.INPUT_RAW_USER, names.INPUT_RAW_ITEM)
        ]
    }
    req = urllib.request.Request(
        f"http://{http_url}/v2/models/{names.MODEL_ENSEMBLE}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def send_aborting_request(http_url: str) -> int:
    """The request that aborts tritonserver 2.51: ``[ABORTING_ROWS, 1]`` declared, one element
    sent; its HTTP status (0: the server died)."""
    return post_ensemble(http_url, ABORTING_ROWS, [1])


# gRPC status codes that mean "the request never got an answer", not "the server rejected it".
_TRANSPORT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN")


def output_problem(request: Request, out: dict[str, np.ndarray]) -> str | None:
    """Why the outputs of a valid request are wrong (shape, range), or None."""
    rows = request.inputs[0][1].shape[0]
    for name, array in out.items():
        if array is None:
            return f"{request.kind}: no output {name}"
        if request.model != names.MODEL_RECOMMEND and array.shape != (rows, 1):
            return f"{request.kind}: {name} shape {array.shape}, expected ({rows}, 1)"
    score = out.get(names.OUTPUT_SCORE, out.get(names.OUTPUT_SCORES))
    if score is not None and not np.all((score >= 0) & (score <= 1)):
        return f"{request.kind}: scores outside [0, 1]"
    return None


class LoadStats:
    """Counts, failure messages and latencies of one run, shared by every worker thread.

    Each update is a read-modify-write of several fields (a count, a list, a dict of lists), so
    every update holds ``lock``: the report must add up to the requests actually sent.
    """

    KEYS = ("valid_ok", "valid_failed", "invalid_rejected", "invalid_accepted", "transport_errors")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.KEYS, 0)
        self.failures: list[str] = []
        self.latency: dict[str, list[float]] = {}
        self.valid_unanswered: list[tuple[float, float]] = []  # (start, end) of valid failures

    def add(
        self, request: Request, span: tuple[float, float], problem: str | None, rejected: bool
    ) -> None:
        """Count one answered request sent and answered at ``span`` (``time.monotonic()``);
        ``problem`` is None for a correct answer."""
        with self.lock:
            self.latency.setdefault(request.kind, []).append(span[1] - span[0])
            if request.valid:
                self.counts["valid_failed" if problem else "valid_ok"] += 1
                if problem:
                    self.failures.append(problem)
                    self.valid_unanswered.append(span)
            elif rejected:
                self.counts["invalid_rejected"] += 1
            else:
                self.counts["invalid_accepted"] += 1
                self.failures.append(f"{request.kind}: the invalid request was accepted")

    def transport_error(
        self, problem: str, request: Request | None = None, span: tuple[float, float] = (0, 0)
    ) -> None:
        """Count a request that got no answer at all (the connection failed) at ``span``."""
        with self.lock:
            self.counts["transport_errors"] += 1
            self.failures.append(problem)
            if request is not None and request.valid:
                self.valid_unanswered.append(span)


def _one(conn: Connection, request: Request) -> tuple[str | None, bool, bool]:
    """(problem, rejected by the server, transport error) of one request."""
    from tritonclient.utils import InferenceServerException

    try:
        out = infer(conn, request.model, request.inputs, request.outputs)
    except InferenceServerException as exc:
        transport = any(t in str(exc.status()) for t in _TRANSPORT)
        return f"{request.kind}: {exc}", not transport, transport
    # HTTP transport errors are not wrapped (geventhttpclient's closed connection is an
    # http.client.HTTPException)
    except (OSError, http.client.HTTPException) as exc:
        return f"{request.kind}: {type(exc).__name__}: {exc}", False, True
    return (output_problem(request, out) if request.valid else None), False, False


RECONNECT_PAUSE_S = 0.05  # after a request got no answer: a new connection, after this pause


def _worker(n, protocol, url, maker, deadline, invalid_fraction, seed, stats: LoadStats) -> None:
    rng = np.random.default_rng([seed, n])
    conn = connect(protocol, url)
    try:
        while time.monotonic() < deadline:
            request = maker.make(rng, invalid_fraction)
            t = time.monotonic()
            problem, rejected, transport = _one(conn, request)
            span = (t, time.monotonic())
            if transport:  # as a client would: a fresh connection (gRPC's backs off for seconds)
                stats.transport_error(problem or "transport error", request, span)
                conn[1].close()
                time.sleep(RECONNECT_PAUSE_S)
                conn = connect(protocol, url)
                continue
            stats.add(request, span, problem, rejected)
    finally:
        conn[1].close()


def _injector(http_url: str, start: float, abort_at_s, sent: list[tuple[float, int]]) -> None:
    """Send the aborting request at ``start + s`` for each ``s`` of ``abort_at_s``; records
    (time sent, HTTP status: 0 when the server died) of each."""
    for at in abort_at_s:
        time.sleep(max(0.0, start + at - time.monotonic()))
        t = time.monotonic()
        sent.append((t, send_aborting_request(http_url)))


def outages(aborts: list[float], ready: list[float], end: float) -> list[tuple[float, float]]:
    """(from, to) of each outage: an aborting request until the first "ready again" after it
    that no earlier outage took (``end`` when the server was not ready again by then).

    Parameters
    ----------
    aborts, ready
        ``time.monotonic()`` of each aborting request sent and of each restart's readiness.
    """
    spans, free = [], sorted(ready)
    for sent in sorted(aborts):
        after = [t for t in free if t >= sent]
        if after:
            free.remove(after[0])
        spans.append((sent, after[0] if after else end))
    return spans


def classify_failures(
    failed: list[tuple[float, float]], down: list[tuple[float, float]]
) -> dict[str, int]:
    """How many of the ``failed`` request spans were in flight when an outage of ``down`` began
    (``in_flight``), were sent while the server was down (``while_down``), or neither (``lost``)."""
    counts = {"in_flight": 0, "while_down": 0, "lost": 0}
    for s, e in failed:
        if any(a <= s <= b for a, b in down):
            counts["while_down"] += 1
        elif any(s < a <= e for a, _ in down):
            counts["in_flight"] += 1
        else:
            counts["lost"] += 1
    return counts


def _percentiles(latency: dict[str, list[float]]) -> dict[str, dict]:
    out = {}
    for kind, values in sorted(latency.items()):
        ms = np.asarray(values) * 1e3
        out[kind] = {"n": int(ms.size), "p50_ms": float(np.percentile(ms, 50))}
        out[kind]["p99_ms"] = float(np.percentile(ms, 99))
    return out


def run_load(
    http_url: str,
    grpc_url: str,
    repo: str | Path,
    server_pid: int,
    duration_s: float = 60.0,
    concurrency: int = 16,
    invalid_fraction: float = 0.25,
    warmup_s: float | None = None,
    seed: int = 0,
    abort_at_s: tuple[float, ...] = (),
    ready_times: list[float] | None = None,
) -> dict:
    """Run the mixed load and report; ``report["passed"]`` sums up the acceptance criteria.

    Parameters
    ----------
    http_url, grpc_url
        ``host:port`` of the server (``TritonServer.http_url`` / ``grpc_url``).
    repo
        The exported repository the server serves (ids are drawn from its manifest and vocab).
    server_pid
        tritonserver's pid, or a callable giving the current one: its RSS (with the python
        stubs) is sampled after ``warmup_s`` (default 20% of the duration) and at the end.
    duration_s, concurrency, invalid_fraction
        Length of the run, client threads (half HTTP, half gRPC), share of invalid requests.
    abort_at_s
        Seconds after the start at which to send the aborting request (module docstring).
    ready_times
        The supervisor's list of "ready again" times (``Supervisor.ready_at``), read at the end.

    Returns
    -------
    dict
        Counts (valid_ok, valid_failed, invalid_rejected, invalid_accepted, transport_errors),
        the valid requests lost and lost in a restart, the aborts and restarts and each outage's
        seconds, up to 20 failure messages, per-kind latency percentiles, RSS after warm-up / at the end /
        their ratio, whether the server answered afterwards, and ``passed``.
    """
    import tritonclient.http as http

    with http.InferenceServerClient(http_url) as probe:
        max_batch = int(probe.get_model_config(names.MODEL_NEUMF)["max_batch_size"])
    maker = RequestMaker(repo, max_batch)
    warmup_s = 0.2 * duration_s if warmup_s is None else warmup_s
    start = time.monotonic()
    deadline = start + duration_s
    stats = LoadStats()
    threads = [
        threading.Thread(
            target=_worker,
            args=(
                n,
                "http" if n % 2 == 0 else "grpc",
                http_url if n % 2 == 0 else grpc_url,
                maker,
                deadline,
                invalid_fraction,
                seed,
                stats,
            ),
            daemon=True,
        )
        for n in range(concurrency)
    ]
    sent: list[tuple[float, int]] = []
    if abort_at_s:  # memory is sampled before the first abort, of the first server
        warmup_s = min(warmup_s, 0.5 * min(abort_at_s))
    threads.append(
        threading.Thread(target=_injector, args=(http_url, start, abort_at_s, sent), daemon=True)
    )
    pid = server_pid if callable(server_pid) else lambda: server_pid
    for t in threads:
        t.start()
    time.sleep(max(0.0, start + warmup_s - time.monotonic()))
    rss_warm = server_rss_bytes(pid())
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    rss_end = server_rss_bytes(pid())
    ready = list(ready_times or [])
    down = outages([t for t, _ in sent], ready, time.monotonic())
    report = _report(stats, maker, http_url, elapsed, concurrency, rss_warm, rss_end)
    report["abort_statuses"] = [status for _, status in sent]
    report["restarts"] = len(ready)
    return _restarts(report, stats, down)


def _restarts(report: dict, stats: LoadStats, down: list[tuple[float, float]]) -> dict:
    """Add the outages to ``report``; with aborts, ``passed`` asks that each abort killed the
    server (no HTTP answer) and was followed by exactly one restart, and that no valid request
    was lost outside the outages (memory is not compared: the server is a new process)."""
    kinds = classify_failures(stats.valid_unanswered, down)
    lost = kinds["lost"]
    report["aborts"] = len(down)
    report["outage_s"] = [round(b - a, 2) for a, b in down]
    report["valid_lost"] = lost
    report["in_flight_at_abort"] = kinds["in_flight"]
    report["sent_while_down"] = kinds["while_down"]
    report["lost_in_restart"] = kinds["in_flight"] + kinds["while_down"]
    if down:
        report["passed"] = bool(
            lost == 0
            and all(status == 0 for status in report["abort_statuses"])
            and report["restarts"] == len(down)
            and report["invalid_accepted"] == 0
            and report["invalid_rejected"] > 0
            and all(b - a < 60 for a, b in down)
            and report["answers_after"]
        )
    return report


def _report(stats: LoadStats, maker, http_url, elapsed, concurrency, rss_warm, rss_end) -> dict:
    counts = dict(stats.counts)
    conn = connect("http", http_url)
    try:
        request = Request(
            "after", *maker.valid_kinds["neumf_b1"](np.random.default_rng(0)), valid=True
        )
        problem, _, _ = _one(conn, request)
    finally:
        conn[1].close()
    rss_ratio = rss_end / rss_warm
    report = {
        "duration_s": round(elapsed, 2),
        "concurrency": concurrency,
        **counts,
        "requests": sum(counts.values()),
        "requests_per_s": round(sum(counts.values()) / elapsed, 1),
        "failures": stats.failures[:20],
        "latency": _percentiles(stats.latency),
        "rss_after_warmup_bytes": rss_warm,
        "rss_end_bytes": rss_end,
        "rss_ratio": round(rss_ratio, 4),
        "answers_after": problem is None,
    }
    report["passed"] = bool(
        counts["valid_failed"] == counts["invalid_accepted"] == counts["transport_errors"] == 0
        and counts["invalid_rejected"] > 0
        and abs(rss_ratio - 1.0) <= 0.10
        and problem is None
    )
    return report
