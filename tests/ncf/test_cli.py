"""The ``ncf`` command: every subcommand exists, has help, and bad input gives one clear line."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ncf.cli import STAGES, main


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_stage_module_has_arguments_and_run(stage):
    """A config and run(cfg), or subcommands of its own (run_argv), or (still) add_arguments."""
    module = importlib.import_module(STAGES[stage][0])
    if hasattr(module, "run_argv"):
        assert callable(module.run_argv)
    elif hasattr(module, "CONFIG"):
        assert callable(module.run)
    else:
        assert callable(module.add_arguments) and callable(module.run)


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
