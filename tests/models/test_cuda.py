"""The same training code on CUDA: fp32/TF32 and AMP (fp16 + GradScaler), data kept on the device.

Skipped without a GPU (run on the lent H200 by the session that owns the models; figures in README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ncf.bench.train_dle import time_dle_steps
from ncf.models import train
from ncf.models.data import load_etl
from ncf.models.distributed import DistEnv
from ncf.models.epoch import epoch_generator, plan_epoch
from ncf.models.presets import TrainConfig
from ncf.models.sampling import PositiveSet, sample_negatives
from ncf.models.trainer import METRICS_FILE, RunOptions, Trainer
from tests.models.conftest import parse

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
ARGS = [
    "--batch-size",
    "256",
    "--eval-batch-size",
    "4096",
    "--lr",
    "0.01",
    "--no-progress",
    "--device",
    "cuda",
]


@pytest.mark.parametrize("amp", [False, True])
def test_trains_on_cuda(etl_dir: Path, tmp_path: Path, amp: bool):
    extra = ["--amp"] if amp else []
    assert (
        train.run(
            parse(train, ["--data", etl_dir, "--out", tmp_path, "--epochs", 4, *ARGS, *extra])
        )
        == 0
    )
    m = json.loads((tmp_path / METRICS_FILE).read_text())
    assert m["device"].startswith("cuda") and m["amp"] is amp
    assert m["hr@10"] > m["itempop_hr@10"] + 0.2


def test_resume_is_exact_on_cuda(etl_dir: Path, tmp_path: Path):
    base = ["--data", etl_dir, *ARGS, "--deterministic"]
    assert train.run(parse(train, [*base, "--out", tmp_path / "a", "--epochs", 3])) == 0
    assert train.run(parse(train, [*base, "--out", tmp_path / "b", "--epochs", 1])) == 0
    assert train.run(parse(train, [*base, "--out", tmp_path / "b", "--epochs", 3, "--resume"])) == 0
    a = json.loads((tmp_path / "a" / METRICS_FILE).read_text())["history"]
    b = json.loads((tmp_path / "b" / METRICS_FILE).read_text())["history"]
    assert [(h["loss"], h["hr@10"]) for h in a] == [(h["loss"], h["hr@10"]) for h in b]


def test_exact_negatives_on_device_are_never_positive():
    g = torch.Generator(device="cuda").manual_seed(0)
    users = torch.randint(0, 500, (20_000,), device="cuda", generator=g)
    items = torch.randint(0, 300, (20_000,), device="cuda", generator=g)
    for backend in ("bitmap", "sorted"):
        pos = PositiveSet(users, items, 500, 300, backend)
        q = torch.arange(500, device="cuda").repeat(200)
        negs = sample_negatives(q, "exact", pos, (0, 300), g)
        assert negs.is_cuda and not pos.contains(q, negs).any()
        known = set(zip(users.tolist(), items.tolist(), strict=True))
        assert not any(
            (u, i) in known for u, i in zip(q[:5000].tolist(), negs[:5000].tolist(), strict=True)
        )


def test_epoch_data_stays_on_the_device(etl_dir: Path, tmp_path: Path):
    env = DistEnv(0, 1, 0, 1, torch.device("cuda", 0))
    data = load_etl(etl_dir, env.device)
    tr = Trainer(data, TrainConfig(batch_size=256), env, RunOptions(out=tmp_path, etl_dir=etl_dir))
    plan = plan_epoch(data, 4, "exact", tr.positives, epoch_generator(1, 0, env.device))
    assert plan.perm.is_cuda and plan.negatives.is_cuda and tr.positives.bitmap.is_cuda
    loss = tr.step(plan, 0, 256, epoch_generator(1, 0, env.device))
    assert loss.is_cuda and torch.isfinite(loss)


@pytest.mark.parametrize("mode", ["fp32", "tf32", "amp"])
def test_dle_reference_step_runs_in_its_gpu_modes(etl_dir: Path, mode: str):
    data = load_etl(etl_dir, torch.device("cuda", 0))
    res = time_dle_steps(data, 512, 1, 2, torch.device("cuda", 0), mode)
    assert res["samples_per_s"] > 0 and res["micro_batch"] == 512
