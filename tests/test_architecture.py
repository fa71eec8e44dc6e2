"""The import rules of docs/ARCHITECTURE.md, enforced with import-linter (contracts in pyproject)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
CONTRACTS = tomli.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "importlinter"
]["contracts"]


def _lint(cwd: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    cmd = [str(LINT), "--no-cache"] + (["--config", str(config)] if config else [])
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_every_contract_is_kept():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in proc.stdout


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["name"] for c in CONTRACTS])
def test_each_contract_catches_a_violation(tmp_path: Path, contract: dict):
    # A minimal tree where the contract's first source module imports its first forbidden module.
    source, forbidden = contract["source_modules"][0], contract["forbidden_modules"][0]
    for module in {source, forbidden} | {m.split(".")[0] for m in (source, forbidden)}:
        path = tmp_path.joinpath(*module.split("."))
        path.mkdir(parents=True, exist_ok=True)
        (path / "__init__.py").touch()
    tmp_path.joinpath(*source.split("."), "__init__.py").write_text(f"import {forbidden}\n")
    roots = sorted({m.split(".")[0] for m in (source, forbidden)})
    config = tmp_path / "contracts.toml"
    config.write_text(
        f"[tool.importlinter]\nroot_packages = {_toml_list(roots)}\n\n"
        f'[[tool.importlinter.contracts]]\nname = "{contract["name"]}"\ntype = "forbidden"\n'
        f"source_modules = {_toml_list([source])}\nforbidden_modules = {_toml_list([forbidden])}\n"
    )
    proc = _lint(tmp_path, config)
    assert proc.returncode == 1 and "1 broken" in proc.stdout, proc.stdout[-2000:]
