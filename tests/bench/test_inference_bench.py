"""``ncf bench inference`` at tiny sizes: real eager/TorchScript/ONNX Runtime runs, timing helpers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ncf.bench import entry, inference
from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving.served import ServingNeuMF


def test_summarize_hand_computed() -> None:
    out = inference.summarize(np.array([0.001, 0.002, 0.003, 0.004]), batch=10)
    assert out["samples_per_s"] == pytest.approx(10 / 0.0025)
    assert out["lat_mean_ms"] == pytest.approx(2.5)
    assert out["lat_p90_ms"] == pytest.approx(3.7)  # linear interpolation: 3 + 0.7 * (4 - 3)
    assert out["lat_p99_ms"] == pytest.approx(3.97)
    assert out["iters"] == 4


def test_time_calls_drops_warmup_and_respects_bounds() -> None:
    calls = []
    lat = inference.time_calls(
        lambda: calls.append(1), lambda: None, warmup=3, min_iters=2, max_iters=7, max_seconds=10.0
    )
    assert lat.size == 7 and len(calls) == 3 + 7
    calls.clear()
    lat = inference.time_calls(
        lambda: calls.append(1), lambda: None, warmup=0, min_iters=4, max_iters=50, max_seconds=0.0
    )
    assert lat.size == 4 and len(calls) == 1 + 4  # one warm-up call always; then min_iters


@pytest.fixture(scope="module")
def tiny() -> NeuMF:
    torch.manual_seed(0)
    model = NeuMF(NeuMFConfig(num_users=50, num_items=40, factors=8, mlp_layers=[16, 8]))
    for emb in (model.mf_user_embed, model.mlp_item_embed):
        torch.nn.init.normal_(emb.weight, 0.0, 1.0)  # spread the scores: a real comparison
    return model.eval()


@pytest.mark.parametrize("backend", ["torchscript", "onnx"])
def test_backends_score_like_eager(tiny: NeuMF, backend: str) -> None:
    scorer = ServingNeuMF(tiny)
    device = torch.device("cpu")
    example = inference.random_ids(tiny.cfg, 8, device, seed=1)
    users, items = inference.random_ids(tiny.cfg, 300, device, seed=2)
    eager = inference.make_runner("eager", scorer, "fp32", device, example)(users, items)
    other = inference.make_runner(backend, scorer, "fp32", device, example)(users, items)
    assert eager.shape == (300, 1) and float(eager.std()) > 1e-3
    torch.testing.assert_close(torch.as_tensor(other), eager, rtol=1e-5, atol=1e-6)


def test_random_ids_cover_valid_rows_only() -> None:
    cfg = NeuMFConfig(num_users=5, num_items=3)
    u, i = inference.random_ids(cfg, 2000, torch.device("cpu"), seed=0)
    assert u.shape == (2000, 1) and u.dtype == torch.int64
    assert set(u.unique().tolist()) == set(range(5)) and set(i.unique().tolist()) == set(range(3))


def _ckpt(tmp_path: Path, model: NeuMF) -> Path:
    path = tmp_path / "best.pt"
    torch.save(
        {
            "model": model.state_dict(),
            "config": model.cfg.to_dict(),
            "epoch": 0,
            "metrics": {},
            "data": {},
        },
        path,
    )
    return path


def test_bench_writes_results_for_a_checkpoint(tiny: NeuMF, tmp_path: Path) -> None:
    argv = [
        "--checkpoint",
        str(_ckpt(tmp_path, tiny)),
        "--batch-sizes",
        "1",
        "16",
        "--precisions",
        "fp32",
        "--warmup",
        "1",
        "--min-iters",
        "2",
        "--max-iters",
        "3",
        "--max-seconds",
        "0.01",
        "--results-dir",
        str(tmp_path / "res"),
    ]
    assert entry.main(inference, argv) == 0
    payload = json.loads((tmp_path / "res" / "inference.json").read_text())
    rows = payload["rows"]
    assert [(r["backend"], r["batch"]) for r in rows] == [
        (b, n) for b in inference.BACKENDS for n in (1, 16)
    ]
    for r in rows:
        assert 2 <= r["iters"] <= 3
        assert r["samples_per_s"] * r["lat_mean_ms"] / 1e3 == pytest.approx(r["batch"])
        assert r["lat_p90_ms"] <= r["lat_p95_ms"] <= r["lat_p99_ms"]
    assert payload["model"] == str(tmp_path / "best.pt") and payload["num_items"] == 40
    assert "| eager | fp32 | cpu | 16 |" in (tmp_path / "res" / "inference.md").read_text()
    assert (tmp_path / "res" / "inference.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys) -> None:
    def err(argv: list[str]) -> str:
        assert entry.main(inference, argv) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m ncf.bench.inference: error: ")
        return lines[0]

    assert "none.pt: no such checkpoint" in err(["--checkpoint", str(tmp_path / "none.pt")])
    assert "--batch-sizes [0]" in err(["--batch-sizes", "0", "--results-dir", str(tmp_path)])
    bad = tmp_path / "bad.pt"
    torch.save({"weights": 1}, bad)
    assert "bad.pt: no 'model' entry" in err(["--checkpoint", str(bad)])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_precisions_score_like_fp32(tiny: NeuMF, tmp_path: Path) -> None:
    device = torch.device("cuda")
    scorer = ServingNeuMF(tiny)
    example = inference.random_ids(tiny.cfg, 8, device, seed=1)
    users, items = inference.random_ids(tiny.cfg, 4096, device, seed=2)
    ref = inference.make_runner("eager", scorer, "fp32", device, example)(users, items)
    for precision in inference.default_precisions("cuda"):
        for backend in ("eager", "torchscript"):
            got = inference.make_runner(backend, scorer, precision, device, example)(users, items)
            torch.testing.assert_close(
                got, ref, rtol=0, atol=2e-2 if precision in ("fp16", "bf16") else 1e-3
            )
    argv = [
        "--device",
        "cuda",
        "--num-users",
        "50",
        "--num-items",
        "40",
        "--batch-sizes",
        "1024",
        "--backends",
        "eager",
        "--max-seconds",
        "0.05",
        "--results-dir",
        str(tmp_path),
        "--no-plot",
    ]
    assert entry.main(inference, argv) == 0
    rows = json.loads((tmp_path / "inference.json").read_text())["rows"]
    assert {r["precision"] for r in rows} == set(inference.default_precisions("cuda"))
