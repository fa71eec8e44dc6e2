"""`make lint` as a test: ruff's lint rules and formatter (configured in pyproject.toml) hold
everywhere, so a change that breaks them fails the test suite, not only `make lint`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command: list[str]):
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"ruff {' '.join(command)} failed; fix with `.venv/bin/ruff check --fix . && "
        f".venv/bin/ruff format .`\n{done.stdout}"
    )
