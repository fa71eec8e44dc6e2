"""bench/train_point.py: the typed point ncf.bench.train hands its worker, through a JSON file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ncf.bench.train_point import TrainPoint

POINT = TrainPoint(
    "work/etl", "cpu", "amp", 4096, "steps", warmup=1, steps=3, micro_batch=0, epochs=0
)


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    point = dataclasses.replace(POINT, warmup=0, steps=7, epochs=3, result=str(tmp_path / "r.json"))
    assert TrainPoint.load(point.save(tmp_path / "p.json")) == point
    assert json.loads((tmp_path / "p.json").read_text())["steps"] == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step": 3}, r"unknown fields \['step'\], missing fields \[\]"),
        ({"batch": None}, "TrainPoint.batch=None: must be int"),
        ({"batch": True}, "TrainPoint.batch=True: must be int"),
        ({"batch": "4096"}, "TrainPoint.batch='4096': must be int"),
        ({"data": 1}, "TrainPoint.data=1: must be str"),
        ({"mode": "train"}, "mode='train'"),
        ({"precision": "fp16"}, "precision='fp16'"),
        ({"grad_compression": "int8"}, "grad_compression='int8'"),
        ({"batch": 0}, "batch=0"),
        ({"warmup": -1}, "warmup=-1"),
    ],
)
def test_bad_fields_name_the_file_and_the_field(tmp_path: Path, change: dict, message: str):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**dataclasses.asdict(POINT), **change}))
    with pytest.raises(ValueError, match=message) as err:
        TrainPoint.load(path)
    assert str(err.value).startswith(f"{path}: ")


def test_missing_fields_and_non_objects(tmp_path: Path) -> None:
    values = dataclasses.asdict(POINT)
    del values["mode"], values["device"]
    with pytest.raises(ValueError, match=r"missing fields \['device', 'mode'\]"):
        TrainPoint.from_dict(values, "x.json")
    with pytest.raises(ValueError, match="x.json: expected a JSON object, got list"):
        TrainPoint.from_dict([1], "x.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json: line 1 column 2: not valid JSON"):
        TrainPoint.load(tmp_path / "bad.json")


def test_worker_refuses_a_bad_point_in_one_line(tmp_path: Path, capsys) -> None:
    from ncf.bench import train_worker

    path = tmp_path / "p.json"
    path.write_text(json.dumps({**dataclasses.asdict(POINT), "mode": "train"}))
    assert train_worker.main([str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"python -m ncf.bench.train_worker: error: {path}: TrainPoint mode='train', "
        "precision='amp', grad_compression='none': modes are ('steps', 'sampling', 'fit'), "
        "precisions ('fp32', 'bf16', 'tf32', 'amp', 'dle', 'dle-tf32', 'dle-amp'), "
        "compressions ('none', 'fp16', 'bf16')"
    ]
