"""Checkpoints: atomic save with a sha256 manifest, weights_only loading, corruption detected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models import checkpoint
from models.neumf import NeuMF, NeuMFConfig


def _state(epoch: int) -> dict:
    torch.manual_seed(epoch)
    model = NeuMF(NeuMFConfig(num_users=7, num_items=9, factors=4, mlp_layers=[8, 4]))
    return {
        "model": model.state_dict(),
        "config": model.cfg.to_dict(),
        "epoch": epoch,
        "metrics": {"hr@10": 0.5},
        "history": [{"epoch": 0, "loss": 0.7}],
    }


def test_round_trip_with_weights_only(tmp_path: Path):
    path = tmp_path / checkpoint.LAST
    digest = checkpoint.save(path, _state(3))
    manifest = checkpoint.read_manifest(tmp_path)
    assert manifest[checkpoint.LAST]["sha256"] == digest == checkpoint.verify(path)
    assert (
        manifest[checkpoint.LAST]["allowed"] == [digest] and manifest[checkpoint.LAST]["epoch"] == 3
    )
    state = torch.load(path, weights_only=True)  # the contract: no pickled code
    model = NeuMF(NeuMFConfig(**state["config"]))
    model.load_state_dict(state["model"])
    assert torch.equal(model.final.weight, _state(3)["model"]["final.weight"])
    assert checkpoint.load(path)["epoch"] == 3


def test_overwrite_updates_the_digest(tmp_path: Path):
    path = tmp_path / checkpoint.BEST
    first = checkpoint.save(path, _state(1))
    second = checkpoint.save(path, _state(2))
    assert first != second and checkpoint.verify(path) == second
    assert checkpoint.read_manifest(tmp_path)[checkpoint.BEST]["allowed"] == [second]


def test_corrupt_file_is_rejected(tmp_path: Path):
    path = tmp_path / checkpoint.LAST
    checkpoint.save(path, _state(1))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match checkpoints.json"):
        checkpoint.load(path)


def test_missing_and_foreign_files(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        checkpoint.load(tmp_path / "best.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="no 'model' entry"):
        checkpoint.load(tmp_path / "other.pt")
    (tmp_path / checkpoint.MANIFEST).write_text(json.dumps({}))
    with pytest.raises(ValueError, match="not listed"):
        checkpoint.verify(tmp_path / "other.pt")


def test_rng_state_round_trip():
    state = checkpoint.rng_state(torch.device("cpu"))
    a = torch.rand(3)
    checkpoint.set_rng_state(state, torch.device("cpu"))
    assert torch.equal(torch.rand(3), a)
