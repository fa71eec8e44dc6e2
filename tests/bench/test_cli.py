"""``ncf bench all``: its steps run through ncf.core.runner.Runner (configs handed over as files)."""

from __future__ import annotations

import json
from pathlib import Path

from ncf.bench import cli as bench_cli
from ncf.bench.readme import ReadmeBench
from ncf.core.config import FORMAT
from ncf.core.runner import Runner


def _plan(tmp_path: Path) -> bench_cli.Plan:
    return bench_cli.Plan(True, 0.01, tmp_path / "r.csv", tmp_path / "w", tmp_path / "res", None)


def test_prepare_makes_every_missing_input(tmp_path: Path) -> None:
    steps = bench_cli.prepare(_plan(tmp_path))
    assert [(name, stage) for name, stage, _ in steps] == [
        ("synth", "synth"),
        ("etl", "etl"),
        ("train", "train"),
        ("export", "export"),
    ]
    synth, etl, train, export = (cfg for _, _, cfg in steps)
    assert synth.out == etl.input == tmp_path / "r.csv" and train.data == export.data == etl.out
    assert (train.preset, train.hp.epochs, train.force) == ("small", 1, True)  # quick: brief
    assert export.checkpoint == train.out / "best.pt"


def test_a_config_step_is_handed_over_as_a_file(tmp_path: Path) -> None:
    """A bench step runs as ``python -m ncf.cli bench NAME --config FILE`` (readme: no data)."""
    readme = tmp_path / "README.md"
    readme.write_text("# T\n<!-- results:start -->\n<!-- results:end -->\n")
    (tmp_path / "res").mkdir()
    runner = Runner(tmp_path / "configs")
    cfg = ReadmeBench(readme=readme, results_dir=tmp_path / "res")
    runner.run("bench-readme", "bench readme", cfg)
    (record,) = runner.records
    assert record["rc"] == 0 and record["command"].startswith("ncf bench readme --config ")
    doc = json.loads((tmp_path / "configs" / "bench-readme.json").read_text())
    assert doc["format"] == FORMAT and doc["stage"] == "bench readme"
    assert doc["config"] == cfg.to_dict()
