"""``ncf bench triton`` against a real tritonserver on a tiny exported repository."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ncf.bench import entry, triton
from ncf.bench.pa_input import pa_input_data
from ncf.core import names
from ncf.serving.client import IdPool

pytest.importorskip("nvtabular")  # the repository fixture fits a real NVTabular Workflow


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ncf.serving.export import export_repository
    from tests.triton_repo import etl_fixture

    root = tmp_path_factory.mktemp("bench-triton")
    (root / "etl").mkdir()
    (root / "run").mkdir()
    etl = etl_fixture.make_etl_dir(root / "etl")
    ckpt = etl_fixture.make_checkpoint(root / "run" / "best.pt", etl)
    export_repository(ckpt, etl, root / "repo")
    return root / "repo"


def test_id_pool_makes_valid_requests(repo: Path) -> None:
    pool = IdPool(repo)
    rng = np.random.default_rng(0)
    (_, u, _), (_, i, _) = pool.inputs(names.MODEL_NEUMF, 500, 10, rng)
    assert u.shape == (500, 1) and pool.users[0] <= u.min() and u.max() < pool.users[1]
    assert pool.items[0] <= i.min() and i.max() < pool.items[1]
    (_, raw, _), _ = pool.inputs(names.MODEL_ENSEMBLE, 50, 10, rng)
    assert np.isin(raw, pool.raw_users).all()
    user, k = pool.inputs(names.MODEL_RECOMMEND, 1, 7, rng)
    assert user[1].shape == (1, 1) and k[1].tolist() == [[7]]
    data = pa_input_data(pool, names.MODEL_NEUMF, 10, n=3, seed=0)["data"]
    assert len(data) == 3 and data[0][names.INPUT_USER]["shape"] == [1]


def test_pa_csv_row_is_converted_to_ms_and_samples() -> None:
    row = {
        "Inferences/Second": "2048",
        "p50 latency": "1500",
        "p90 latency": "2000",
        "p99 latency": "4000",
        "Server Queue": "100",
        "Server Compute Input": "10",
        "Server Compute Infer": "300",
        "Server Compute Output": "5",
    }
    out = triton._pa_row(row, batch=1024, protocol="grpc")
    assert out["infer_per_s"] == 2.0 and out["samples_per_s"] == 2048.0
    assert (out["lat_p50_ms"], out["lat_p99_ms"]) == (1.5, 4.0)
    assert (out["server_queue_us"], out["server_compute_us"]) == (100.0, 315.0)


@pytest.mark.triton
def test_bench_runs_every_model_and_protocol(repo: Path, tmp_path: Path) -> None:
    argv = [
        "--repo",
        str(repo),
        "--batch-sizes",
        "1",
        "8",
        "--concurrency",
        "2",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--generator",
        "tritonclient",
        "--results-dir",
        str(tmp_path),
        "--no-plot",
    ]
    assert entry.main(triton, argv) == 0
    payload = json.loads((tmp_path / "triton.json").read_text())
    got = [(r["model"], r["protocol"], r["batch"]) for r in payload["rows"]]
    assert got == [
        (m, p, b)
        for m in triton.MODELS
        for p in ("http", "grpc")
        for b in ((1,) if m == names.MODEL_RECOMMEND else (1, 8))
    ]
    for r in payload["rows"]:
        assert r["errors"] == 0 and r["requests"] > 0 and r["generator"].startswith("tritonclient")
        assert r["samples_per_s"] == pytest.approx(r["infer_per_s"] * r["batch"])
        assert r["lat_p50_ms"] <= r["lat_p90_ms"] <= r["lat_p99_ms"]
        assert r["server_compute_us"] > 0  # the server's own statistics moved


@pytest.mark.triton
def test_perf_analyzer_point(repo: Path, tmp_path: Path) -> None:
    if not triton.pa_available(triton.PA_DEFAULT):
        pytest.skip("perf_analyzer not built here (bench/setup_perf_analyzer.sh)")
    argv = [
        "--repo",
        str(repo),
        "--models",
        "neumf",
        "--protocols",
        "grpc",
        "--batch-sizes",
        "8",
        "--concurrency",
        "1",
        "--duration",
        "0.6",
        "--generator",
        "perf_analyzer",
        "--results-dir",
        str(tmp_path),
        "--no-plot",
    ]
    assert entry.main(triton, argv) == 0
    (row,) = json.loads((tmp_path / "triton.json").read_text())["rows"]
    assert row["generator"] == "perf_analyzer 2.51 (grpc)" and row["samples_per_s"] > 0


def test_a_closed_window_still_waits_for_one_measured_request():
    shared = triton._Shared(max_requests=2, warmup=0.0, duration=0.0)
    shared.open_window()  # the window is already over: a machine slower than the duration
    assert shared.take(measured=False) and not shared.take(measured=True)
    assert shared.record(shared.measure_from, shared.measure_from + 0.01)
    assert shared.latencies == [pytest.approx(0.01)]
    assert not shared.take(measured=False)  # the request cap (2) still holds
