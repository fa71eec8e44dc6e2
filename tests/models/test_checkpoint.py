"""Checkpoints: atomic save with a sha256 manifest, weights_only loading, corruption detected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ncf.models import checkpoint
from ncf.models.neumf import NeuMF, NeuMFConfig


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


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _callable(path: Path) -> None:
    torch.save({**_state(1), "hook": print}, path)  # a pickled callable: refused by weights_only


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a checkpoint")


def _a_list(path: Path) -> None:
    torch.save([1, 2], path)


def _wrong_shapes(path: Path) -> None:
    state = _state(1)
    state["config"]["factors"] = 5
    torch.save(state, path)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (_truncated, "truncated or corrupt"),
        (_garbage, "truncated or corrupt"),
        (_callable, "pickled objects other than tensors"),
        (_a_list, "holds a list, not a checkpoint dict"),
        (_wrong_shapes, "weights do not match its config"),
    ],
)
def test_every_bad_file_is_one_line_naming_it(tmp_path: Path, damage, match):
    path = tmp_path / "best.pt"
    torch.save(_state(1), path)  # no manifest beside it: the loader itself must catch each case
    damage(path)
    with pytest.raises(ValueError, match=match) as info:
        checkpoint.load_model(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message


def test_load_model_strips_ddp_prefixes_and_checks_the_manifest(tmp_path: Path):
    state = _state(2)
    state["model"] = {f"module.{k}": v for k, v in state["model"].items()}
    path = tmp_path / checkpoint.BEST
    checkpoint.save(path, state)
    model, loaded = checkpoint.load_model(path)
    assert loaded["epoch"] == 2 and not model.training
    assert torch.equal(model.final.weight, _state(2)["model"]["final.weight"])
    checkpoint.save(tmp_path / "other.pt", _state(3))
    (tmp_path / "other.pt").replace(path)  # a valid file, but not the one the manifest lists
    with pytest.raises(ValueError, match="does not match checkpoints.json"):
        checkpoint.load_model(path)
