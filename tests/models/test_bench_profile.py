"""bench/profile_step.py: the operator table (hand-made events) and a real profiled CPU step."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ncf.bench import entry, profile_step
from ncf.core.config import resolve


def _evt(key, count, cpu_us, device_us=0.0, device_type=torch.autograd.DeviceType.CPU):
    return SimpleNamespace(
        key=key,
        count=count,
        self_cpu_time_total=cpu_us,
        self_device_time_total=device_us,
        device_type=device_type,
    )


def test_op_table_per_step_shares_and_order():
    events = [_evt("a", 4, 1000.0), _evt("b", 2, 3000.0), _evt("c", 2, 0.0)]
    rows = profile_step.op_table(events, steps=2, on_device=False, top=2)
    assert [r["op"] for r in rows] == ["b", "a"]  # by self time, cut at top
    assert rows[0] == {
        "op": "b",
        "calls_per_step": 1.0,
        "self_ms_per_step": 1.5,
        "self_cpu_ms_per_step": 1.5,
        "share_pct": 75.0,
    }
    assert rows[1]["share_pct"] == 25.0 and rows[1]["calls_per_step"] == 2.0


def test_a_negative_self_time_counts_as_none():
    events = [_evt("a", 1, 3000.0), _evt("b", 1, 1000.0), _evt("parent", 1, -500.0)]
    rows = profile_step.op_table(events, steps=1, on_device=False, top=3)
    assert [(r["op"], r["share_pct"]) for r in rows] == [("a", 75.0), ("b", 25.0), ("parent", 0.0)]


def test_op_table_on_a_gpu_counts_each_kernel_once():
    """Kernel events (CUDA) repeat the device time of the operator that launched them."""
    cuda = torch.autograd.DeviceType.CUDA
    events = [
        _evt("aten::mm", 1, 50.0, device_us=900.0),
        _evt("ampere_sgemm", 1, 0.0, device_us=900.0, device_type=cuda),
        _evt("aten::add", 1, 20.0, device_us=100.0),
    ]
    rows = profile_step.op_table(events, steps=1, on_device=True, top=10)
    assert [(r["op"], r["share_pct"]) for r in rows] == [("aten::mm", 90.0), ("aten::add", 10.0)]


def test_profiles_real_steps(etl_dir: Path, tmp_path: Path):
    argv = ["--data", str(etl_dir), "--batch", "512", "--warmup", "1", "--steps", "2"]
    assert entry.main(profile_step, [*argv, "--results-dir", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "profile_step.json").read_text())
    ops = {r["op"] for r in payload["rows"]}
    assert {"aten::addmm", "aten::mm"} & ops  # the MLP's matmuls are among the top operators
    assert payload["step"]["batch"] == 512 and payload["step"]["profiled_step_s"] > 0
    assert 0 < sum(r["share_pct"] for r in payload["rows"]) <= 100.01


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--batch", "0"]])
def test_bad_arguments_are_refused(bad: list[str], tmp_path: Path, capsys):
    assert entry.main(profile_step, ["--data", str(tmp_path), *bad]) == 2
    assert "python -m ncf.bench.profile_step: error: " in capsys.readouterr().err
    with pytest.raises(ValueError, match="need steps >= 1"):
        resolve(profile_step.CONFIG, ["--data", str(tmp_path), *bad], "bench profile")
