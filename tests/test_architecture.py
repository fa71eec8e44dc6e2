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


def _violation(contract: dict) -> tuple[str, str]:
    """(importer, imported): an import that ``contract`` forbids."""
    if contract["type"] == "layers":  # the ground floor importing the front door
        low = contract["layers"][-1].split("|")[0].strip()
        high = contract["layers"][0].split("|")[0].strip()
        return low, high
    return contract["source_modules"][0], contract["forbidden_modules"][0]


def _toml_contract(contract: dict, source: str, forbidden: str) -> str:
    head = f'[[tool.importlinter.contracts]]\nname = "{contract["name"]}"\ntype = "{contract["type"]}"\n'
    if contract["type"] == "layers":
        return head + f"layers = {_toml_list(contract['layers'])}\n"
    return (
        head
        + f"source_modules = {_toml_list([source])}\nforbidden_modules = {_toml_list([forbidden])}\n"
    )


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["name"] for c in CONTRACTS])
def test_each_contract_catches_a_violation(tmp_path: Path, contract: dict):
    # A minimal tree of the contract's modules where one imports a module the contract forbids.
    source, forbidden = _violation(contract)
    layers = [m.strip() for layer in contract.get("layers", []) for m in layer.split("|")]
    for module in {source, forbidden, *layers}:
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            path = tmp_path.joinpath(*parts[:depth])
            path.mkdir(parents=True, exist_ok=True)
            if depth > 1:  # the top level, ncf, is a namespace package as in the repository
                (path / "__init__.py").touch()
    tmp_path.joinpath(*source.split("."), "__init__.py").write_text(f"import {forbidden}\n")
    # Roots are the portions of the namespace ncf (ncf.serving, not ncf.models.train).
    roots = sorted(
        {".".join(m.split(".")[:2]) for m in (source, forbidden, *layers)} - {"torch", "nvtabular"}
    )
    config = tmp_path / "contracts.toml"
    config.write_text(
        f"[tool.importlinter]\nroot_packages = {_toml_list(roots)}\n"
        "include_external_packages = true\n\n" + _toml_contract(contract, source, forbidden)
    )
    proc = _lint(tmp_path, config)
    assert proc.returncode == 1 and "1 broken" in proc.stdout, proc.stdout[-2000:]


# The repository's top-level folders of the stages: importable under these names only from the
# repository root, and never installed under them (pyproject maps them into ncf.*).
TOP_LEVEL_FOLDERS = ("sources", "workflows", "models", "serving", "bench", "datasets")


def test_no_module_imports_a_stage_by_its_folder_name():
    import grimp

    roots = tomli.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "importlinter"
    ]["root_packages"]
    graph = grimp.build_graph(*roots, include_external_packages=True)
    wrong = sorted(
        (importer, name)
        for name in TOP_LEVEL_FOLDERS
        if name in graph.modules
        for importer in graph.find_modules_that_directly_import(name)
    )
    assert wrong == []
