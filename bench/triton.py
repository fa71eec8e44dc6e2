"""``ncf bench triton``: throughput and latency of the served models on a real tritonserver.

The bench starts its own server on loopback ports (``ncf.serving.server.TritonServer``) on an
exported repository and loads ``neumf`` (model ids), ``ncf`` (the ensemble: raw ids -> workflow ->
neumf) and ``recommend`` (top-K for one raw userId). For each model x protocol (HTTP, gRPC) x batch
(1, 1024; ``recommend`` is one user per request) x concurrency (1, 4, 8, 16) it reports throughput
and p50/p90/p99 latency, plus the server's own mean queue and compute time per request from its
statistics endpoint (summed over the composing models of an ensemble or BLS model).

With ``--merlin-repo`` (what ``ncf export --with merlin-systems`` wrote), merlin-systems' own
serving of the same model (``merlin_ncf``: its executor model, the Workflow and the TorchScript
model) is measured in the same run, on the same grid and ids, beside ours, on a second server
started once the first has stopped. Its model does not batch (dims ``[-1]``), so perf_analyzer's
``-b`` does not apply to it: a run with ``--merlin-repo`` loads every model with the tritonclient
threads.

The load comes from Triton's perf_analyzer 2.51 (``bench/setup_perf_analyzer.sh`` builds it in
``.venv-pa``; fed with real ids through ``--input-data``) when it runs here, else from the
project's own bounded tritonclient generator (threads, one client each); the ``generator`` column
says which produced each row.

    ncf export --checkpoint work/train/best.pt --data work/etl --repo triton_repo
    python -m ncf.bench.triton --repo triton_repo
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import BenchError, Plot, Results
from ncf.bench.pa_input import pa_input_data
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, flag, setting
from ncf.serving.client import (
    PROTOCOLS,
    IdPool,
    Inputs,
    cast_inputs,
    config_input_types,
    connect,
    infer_inputs,
)
from ncf.serving.server import COMPOSING_MODELS

PA_DEFAULT = Path(__file__).resolve().parents[1] / ".venv-pa" / "bin" / "pa"

COLUMNS = (
    "model",
    "protocol",
    "batch",
    "concurrency",
    "generator",
    "samples_per_s",
    "infer_per_s",
    "lat_p50_ms",
    "lat_p90_ms",
    "lat_p99_ms",
    "server_queue_us",
    "server_compute_us",
    "errors",
)
MODELS = (names.MODEL_NEUMF, names.MODEL_ENSEMBLE, names.MODEL_RECOMMEND)
MERLIN_STEPS = ("0_transformworkflowtriton", "1_predictpytorchtriton")  # merlin-systems' names
# auto: perf_analyzer when it runs here, else the project's own tritonclient threads
GENERATORS = ("auto", "perf_analyzer", "tritonclient")
# Models each benchmarked model calls (they must be loaded too).
COMPOSING = {m: COMPOSING_MODELS.get(m, ()) for m in MODELS}
# Models whose statistics add up to a request's server time: an ensemble has no compute of its
# own (its steps do), while a BLS model's compute already includes the calls it makes.
STATS_MODELS = {
    names.MODEL_NEUMF: (names.MODEL_NEUMF,),
    names.MODEL_ENSEMBLE: (names.MODEL_ENSEMBLE, names.MODEL_WORKFLOW, names.MODEL_NEUMF),
    names.MODEL_RECOMMEND: (names.MODEL_RECOMMEND,),
    names.MERLIN_MODEL: (names.MERLIN_MODEL,),  # its executor model calls the steps by BLS
}


# -- server statistics ------------------------------------------------------------------------


class ServerStats:
    """Snapshots of Triton's per-model inference statistics (HTTP statistics endpoint)."""

    FIELDS = ("queue", "compute_input", "compute_infer", "compute_output")

    def __init__(self, http_url: str, models: Sequence[str]):
        self.http_url, self.models = http_url, list(models)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """``{model: {"count": successes, "<field>_ns": total ns}}`` summed over versions."""
        _, client = connect("http", self.http_url)
        try:
            out = {}
            for m in self.models:
                snap = {"count": 0, **{f"{f}_ns": 0 for f in self.FIELDS}}
                for ms in client.get_inference_statistics(model_name=m)["model_stats"]:
                    stats = ms["inference_stats"]
                    snap["count"] += int(stats["success"]["count"])
                    for f in self.FIELDS:
                        snap[f"{f}_ns"] += int(stats[f]["ns"])
                out[m] = snap
            return out
        finally:
            client.close()

    def per_request(self, before: dict, after: dict) -> dict[str, float | None]:
        """Mean queue and compute (input + infer + output) microseconds per request, summed over
        the models (each averaged over its own requests: a composing model sees one per call)."""
        queue = compute = 0.0
        for m in self.models:
            n = after[m]["count"] - before[m]["count"]
            if n <= 0:
                continue
            d = {k: after[m][k] - before[m][k] for k in after[m]}
            queue += d["queue_ns"] / n / 1e3
            compute += sum(d[f"{f}_ns"] for f in self.FIELDS[1:]) / n / 1e3
        return {"queue_us": round(queue, 1), "compute_us": round(compute, 1)}


# -- the project's own load generator ---------------------------------------------------------


class _Shared:
    """State shared by the load threads (guarded by one lock); the window opens at the barrier."""

    def __init__(self, max_requests: int, warmup: float, duration: float):
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.left = max_requests
        self.last_done = 0.0
        self.warmup, self.duration = warmup, duration
        self.measure_from = self.end = 0.0

    def open_window(self) -> None:
        """Barrier action: every client is connected; warm-up starts now."""
        now = time.perf_counter()
        self.measure_from, self.end = now + self.warmup, now + self.warmup + self.duration

    def take(self, measured: bool) -> bool:
        """May a thread send another request? Until the window closes, and in any case until the
        thread has one measured request (a slow machine still gets a figure)."""
        with self.lock:
            self.left -= 1
            return self.left >= 0 and (time.perf_counter() < self.end or not measured)

    def record(self, t0: float, t1: float) -> bool:
        """Keep the latency of a request sent after the warm-up; whether it was kept."""
        if t0 < self.measure_from:
            return False
        with self.lock:
            self.latencies.append(t1 - t0)
            self.last_done = max(self.last_done, t1)
        return True

    def error(self, exc: Exception) -> None:
        with self.lock:
            self.errors.append(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)


def _load_thread(
    protocol: str,
    url: str,
    model: str,
    requests: list[Inputs],
    start: threading.Barrier,
    shared: _Shared,
) -> None:
    """Send requests back to back until the window closes (or the shared cap is reached)."""
    module, client = connect(protocol, url)
    try:
        prepared = [infer_inputs(module, r) for r in requests]
        start.wait()
        n, measured = 0, False
        while shared.take(measured):
            t0 = time.perf_counter()
            try:
                client.infer(model, prepared[n % len(prepared)])
            except Exception as exc:  # a failed request is counted and reported, not fatal
                shared.error(exc)
                measured = True  # an error ends the thread's claim to a measured request
            else:
                measured = shared.record(t0, time.perf_counter()) or measured
            n += 1
    finally:
        client.close()


def run_threads(
    protocol: str,
    url: str,
    model: str,
    requests: list[Inputs],
    concurrency: int,
    duration: float,
    warmup: float,
    max_requests: int,
) -> dict:
    """Closed-loop load: ``concurrency`` threads, each with its own client, for ``warmup +
    duration`` seconds (at most ``max_requests`` requests); warm-up latencies are dropped."""
    shared = _Shared(max_requests, warmup, duration)
    start = threading.Barrier(concurrency, action=shared.open_window)
    threads = [
        threading.Thread(
            target=_load_thread, daemon=True, args=(protocol, url, model, requests, start, shared)
        )
        for _ in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=warmup + duration + 120)
    lat = np.asarray(shared.latencies)
    if lat.size == 0:
        raise BenchError(f"{model} over {protocol}: no request succeeded ({shared.errors[:3]})")
    window = max(shared.last_done - shared.measure_from, 1e-9)
    batch = 1 if model == names.MODEL_RECOMMEND else requests[0][0][1].shape[0]
    p50, p90, p99 = np.percentile(lat, [50, 90, 99]) * 1e3
    return {
        "generator": f"tritonclient threads ({protocol})",
        "requests": int(lat.size),
        "infer_per_s": lat.size / window,
        "samples_per_s": lat.size * batch / window,
        "lat_p50_ms": float(p50),
        "lat_p90_ms": float(p90),
        "lat_p99_ms": float(p99),
        "errors": len(shared.errors),
    }


# -- perf_analyzer --------------------------------------------------------------------------


def pa_available(pa: Path) -> bool:
    """True if the perf_analyzer wrapper runs on this machine."""
    try:
        proc = subprocess.run([str(pa), "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and b"Perf Analyzer" in proc.stdout + proc.stderr


def run_perf_analyzer(
    pa: Path,
    pool: IdPool,
    model: str,
    protocol: str,
    url: str,
    batch: int,
    concurrency: int,
    duration: float,
    k: int,
    composing: Sequence[str],
) -> dict:
    """One perf_analyzer measurement (3 windows of ``duration / 3`` s); its CSV row as a dict."""
    with tempfile.TemporaryDirectory(prefix="ncf-pa-") as tmp:
        data, report = Path(tmp) / "data.json", Path(tmp) / "report.csv"
        data.write_text(json.dumps(pa_input_data(pool, model, k, max(batch, 64), seed=concurrency)))
        cmd = [
            str(pa),
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "--input-data",
            str(data),
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            *_pa_windows(model, duration),
            "--max-trials",
            "3",
            "--stability-percentage",
            "999",
            "-f",
            str(report),
        ]
        if model != names.MODEL_RECOMMEND:
            cmd += ["-b", str(batch)]
        if model == names.MODEL_RECOMMEND and composing:
            cmd.append("--bls-composing-models=" + ",".join(composing))
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=duration * 10 + 60, check=False
        )
        if proc.returncode != 0 or not report.exists():
            raise BenchError(
                f"perf_analyzer failed ({proc.returncode}): {shlex.join(cmd)}\n"
                f"{(proc.stdout + proc.stderr)[-2000:]}"
            )
        with open(report, newline="") as f:
            row = next(csv.DictReader(f))
    return _pa_row(row, batch if model != names.MODEL_RECOMMEND else 1, protocol)


def _pa_windows(model: str, duration: float) -> list[str]:
    """Time windows of ``duration / 3`` s; ``recommend`` (tens of ms a request) counts requests
    instead, or its short windows hold too few requests to be judged stable."""
    if model == names.MODEL_RECOMMEND:
        return ["--measurement-mode", "count_windows", "--measurement-request-count", "20"]
    return ["--measurement-interval", str(max(int(duration * 1000 / 3), 100))]


def _pa_row(row: dict[str, str], batch: int, protocol: str) -> dict:
    """perf_analyzer CSV (microseconds, inferences = samples) -> this bench's columns."""
    us = lambda key: float(row[key]) if row.get(key) not in (None, "") else None  # noqa: E731
    samples = float(row["Inferences/Second"])
    compute = sum(
        us(c) or 0.0
        for c in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
    )
    return {
        "generator": f"perf_analyzer 2.51 ({protocol})",
        "samples_per_s": samples,
        "infer_per_s": samples / batch,
        "lat_p50_ms": us("p50 latency") / 1e3,
        "lat_p90_ms": us("p90 latency") / 1e3,
        "lat_p99_ms": us("p99 latency") / 1e3,
        "server_queue_us": us("Server Queue"),
        "server_compute_us": round(compute, 1),
        "errors": 0,
    }


@dataclass
class TritonBench(Config):
    """A real tritonserver: neumf, ncf, recommend over HTTP and gRPC."""

    repo: Path = setting(
        Path("triton_repo"), help="exported model repository (`ncf export --repo`)"
    )
    models: list[str] = setting(default_factory=lambda: list(MODELS), choices=MODELS, help="models")
    protocols: list[str] = setting(
        default_factory=lambda: list(PROTOCOLS), choices=PROTOCOLS, help="protocols"
    )
    batch_sizes: list[int] = setting(default_factory=lambda: [1, 1024], help="batch sizes")
    concurrency: list[int] = setting(default_factory=lambda: [1, 4, 8, 16], help="concurrencies")
    duration: float = setting(3.0, help="measured seconds per point")
    warmup: float = setting(0.5, help="unmeasured seconds per point first")
    max_requests: int = setting(100_000, help="cap per point (threads)")
    k: int = setting(10, help="recommendations per `recommend` request")
    merlin_repo: Path | None = setting(
        None,
        help="merlin-systems' repository (`ncf export --with merlin-systems`): its merlin_ncf "
        "measured beside ours in this run (unset: not measured)",
    )
    generator: str = setting(
        "auto",
        choices=GENERATORS,
        help="auto: perf_analyzer when it runs here, else the tritonclient threads",
    )
    perf_analyzer: Path = setting(
        PA_DEFAULT, help="perf_analyzer wrapper (bench/setup_perf_analyzer.sh builds it)"
    )
    seed: int = setting(DEFAULT_SEED, help="seed of the ids (the threads' load)")
    name: str = setting("triton", help="results name (<results-dir>/<name>.json)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    plot: bool = flag(True, help="write the PNG plot (--no-plot: skip it)")

    def check(self) -> None:
        _validate(self)


CONFIG = TritonBench


def points(args: TritonBench, models: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """(model, protocol, batch, concurrency) to measure; ``recommend`` takes one user per request."""
    out = []
    for model in models:
        batches = [1] if model == names.MODEL_RECOMMEND else args.batch_sizes
        for protocol in args.protocols:
            out += [(model, protocol, b, c) for b in batches for c in args.concurrency]
    return out


def _validate(args: TritonBench) -> None:
    bad = [b for b in args.batch_sizes if b < 1] + [c for c in args.concurrency if c < 1]
    if bad:
        raise ValueError(f"--batch-sizes/--concurrency {bad}: every value must be >= 1")
    if args.duration <= 0 or args.warmup < 0:
        raise ValueError(f"--duration {args.duration} / --warmup {args.warmup}: need > 0 and >= 0")
    if args.merlin_repo is not None:
        if args.generator == "perf_analyzer":
            raise ValueError(
                f"--generator perf_analyzer with --merlin-repo: {names.MERLIN_MODEL} does not "
                "batch (perf_analyzer's -b); use --generator tritonclient (or auto)"
            )
    if args.generator == "perf_analyzer" and not pa_available(args.perf_analyzer):
        raise FileNotFoundError(
            f"{args.perf_analyzer} does not run: build it with "
            "bench/setup_perf_analyzer.sh (or use --generator tritonclient)"
        )


def measure(
    server,
    pool: IdPool,
    point: tuple[str, str, int, int],
    use_pa: bool,
    args: TritonBench,
    failures: list[str],
    types: dict[str, str] | None = None,
) -> dict:
    """One row: the load from perf_analyzer or the own generator, plus server statistics;
    ``types`` casts the requests' inputs (input name -> Triton datatype)."""
    model, protocol, batch, conc = point
    url = server.http_url if protocol == "http" else server.grpc_url
    stats = ServerStats(server.http_url, STATS_MODELS[model])
    before = stats.snapshot()
    res = None
    if use_pa:
        try:
            res = run_perf_analyzer(
                args.perf_analyzer,
                pool,
                model,
                protocol,
                url,
                batch,
                conc,
                args.duration,
                args.k,
                COMPOSING[model],
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            # Keep the row: measure it with the own generator and say why in the results.
            print(f"perf_analyzer failed on {point}; using tritonclient threads", file=sys.stderr)
            failures.append(f"{model}/{protocol}/b{batch}/c{conc}: {str(exc).splitlines()[-1]}")
    if res is None:
        requests = [
            cast_inputs(
                pool.inputs(model, batch, args.k, np.random.default_rng(args.seed + i)), types or {}
            )
            for i in range(16)
        ]
        res = run_threads(
            protocol, url, model, requests, conc, args.duration, args.warmup, args.max_requests
        )
    server_times = stats.per_request(before, stats.snapshot())
    row = {"model": model, "protocol": protocol, "batch": batch, "concurrency": conc, **res}
    row.setdefault("server_queue_us", server_times["queue_us"])
    row.setdefault("server_compute_us", server_times["compute_us"])
    return row


def _serve_and_measure(
    repo: Path, models: Sequence[str], load: Sequence[str], use_pa: bool, args, failures: list
) -> list[dict]:
    """The rows of ``models`` on a server of ``repo`` that loads ``load``."""
    from ncf.serving.server import TritonServer

    rows: list[dict] = []
    # merlin_ncf takes raw ids in the dtype the Workflow was fit on (INT32 or INT64)
    types = {m: config_input_types(repo / m) for m in models if m == names.MERLIN_MODEL}
    with TritonServer(repo, models=list(load)) as server:
        pool = IdPool(args.repo)  # our export's ids: the merlin export has the same vocabulary
        for point in points(args, models):
            rows.append(measure(server, pool, point, use_pa, args, failures, types.get(point[0])))
            r = rows[-1]
            print(
                f"{r['model']:10s} {r['protocol']:4s} b={r['batch']:<5d} c={r['concurrency']:<3d}"
                f" {r['samples_per_s']:>12,.0f} samples/s  p50 {r['lat_p50_ms']:.2f} ms"
                f"  ({r['generator']})",
                file=sys.stderr,
                flush=True,
            )
    return rows


def run(args: TritonBench) -> Results:
    # checked when run, not when parsed: a command may name the folder an export will write
    if args.merlin_repo and not (args.merlin_repo / names.MERLIN_MODEL / "config.pbtxt").is_file():
        raise ValueError(
            f"--merlin-repo {args.merlin_repo}: no {names.MERLIN_MODEL}/config.pbtxt; write "
            "it with `ncf export ... --with merlin-systems --merlin-repo DIR`"
        )
    use_pa = args.merlin_repo is None and (
        args.generator == "perf_analyzer"
        or (args.generator == "auto" and pa_available(args.perf_analyzer))
    )
    load = sorted({m for model in args.models for m in (model, *COMPOSING[model])})
    pa_failures: list[str] = []
    rows = _serve_and_measure(args.repo, args.models, load, use_pa, args, pa_failures)
    if args.merlin_repo is not None:
        steps = [m for m in MERLIN_STEPS if (args.merlin_repo / m / "config.pbtxt").is_file()]
        rows += _serve_and_measure(
            args.merlin_repo, [names.MERLIN_MODEL], [names.MERLIN_MODEL, *steps], False, args, []
        )
    extra = {
        "repo": str(args.repo.resolve()),
        "merlin_repo": str(args.merlin_repo.resolve()) if args.merlin_repo else None,
        "server": "tritonserver 2.51.0 (nvidia-pytriton), "
        "python backend, loopback; client and server share this machine's cores",
        "settings": {k: getattr(args, k) for k in ("duration", "warmup", "max_requests", "k")},
        "perf_analyzer": "used" if use_pa else "not available (bench/setup_perf_analyzer.sh)",
        "perf_analyzer_failures": pa_failures,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),  # > cores: timings are contended
    }
    plot = Plot(
        x="concurrency",
        y="samples_per_s",
        series=("model", "protocol", "batch"),
        title="Triton: throughput and p99 latency vs concurrency",
        logy=True,
        y2="lat_p99_ms",
    )
    return Results(
        args.name,
        rows,
        COLUMNS,
        "Triton serving (CPU, python backend)",
        args.results_dir,
        extra,
        plot,
    )


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
