"""The ``ncf`` command: every subcommand exists, has help, and bad input gives one clear line."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from ncf.cli import STAGES, main
from ncf.core.config import DEFAULT_SEED, Config

# Stages whose settings are a typed config (the CLI generated from it; no add_arguments).
CONFIG_STAGES = tuple(s for s in STAGES if s != "bench")  # bench: one config per bench (run_argv)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_stage_module_has_a_config_or_its_own_parser_and_run(stage):
    module = importlib.import_module(STAGES[stage][0])
    if hasattr(module, "run_argv"):
        assert callable(module.run_argv)
    else:
        assert issubclass(module.CONFIG, Config) and callable(module.run)


@pytest.mark.parametrize("stage", CONFIG_STAGES)
def test_config_stages_declare_no_flags_by_hand(stage):
    module = importlib.import_module(STAGES[stage][0])
    assert issubclass(module.CONFIG, Config) and not hasattr(module, "add_arguments")
    assert "add_argument(" not in Path(module.__file__).read_text()


@pytest.mark.parametrize("stage", CONFIG_STAGES)
def test_every_seed_defaults_to_the_one_seed_default(stage):
    cfg = importlib.import_module(STAGES[stage][0]).CONFIG
    seeds = [f for f in dataclasses.fields(cfg) if f.name == "seed"]
    assert all(f.default == DEFAULT_SEED for f in seeds)


def test_evaluation_negatives_have_one_name_and_one_default():
    from ncf.cli.pipeline import RunConfig
    from ncf.workflows.etl import EtlConfig

    assert RunConfig().eval_negatives == EtlConfig().eval_negatives == 100
    assert "negatives" not in {f.name for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_subcommand_help(stage, capsys):
    with pytest.raises(SystemExit) as exc:
        main([stage, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ncf " + stage)


def test_top_level_help_lists_all_stages():
    out = subprocess.run(
        [sys.executable, "-m", "ncf.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for stage in STAGES:
        assert f"    {stage}" in out


def test_missing_input_is_one_clear_line(tmp_path, capsys):
    missing = tmp_path / "nope" / "ratings.csv"
    rc = main(["etl", "--input", str(missing), "--out", str(tmp_path / "etl")])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(missing) in err and "Traceback" not in err
    assert not (tmp_path / "etl").exists()


def test_parse_error_is_one_line(capsys):
    assert main(["etl", "--input", "r.csv", "--out", "o", "--negatives", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ncf etl: error: unrecognized arguments")


def test_the_error_boundary_survives_the_report_submodule(tmp_path, capsys):
    # ncf.cli.report (ncf run's report) is a submodule: importing it sets the attribute `report`
    # of ncf.cli, which must not be the boundary's function.
    import ncf.cli.report  # noqa: F401

    missing = tmp_path / "missing.json"
    assert main(["synth", "--config", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ncf synth: error: ") and str(missing) in err[0]
