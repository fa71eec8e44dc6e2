"""The installed distribution claims one top-level name, ``ncf``: the stage folders are mapped under
it (pyproject), so an environment's own ``datasets`` (Hugging Face's), ``models`` or ``bench`` stay
theirs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HF_DATASETS = "datasets==5.2.0"  # Hugging Face's package, the one the old top-level name shadowed
STAGES = ("cli", "core", "sources", "workflows", "models", "serving", "bench")


def _pip(*args: str, cwd: Path = ROOT) -> None:
    cmd = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    src = tmp_path_factory.mktemp("src") / "ncf-merlin"
    skip = (".git", ".venv*", "build", "*.egg-info", "work", "runs", "data", "triton_repo", "tests")
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*skip), symlinks=True)
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "-w", str(out), str(src), cwd=src)
    (path,) = out.glob("ncf_merlin-*.whl")
    return path


@pytest.mark.slow
def test_the_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"ncf", wheel.name.split("-py3")[0] + ".dist-info"}
    assert {n.split("/")[1] for n in names if n.startswith("ncf/")} == set(STAGES)
    assert "ncf/__init__.py" not in names  # a namespace package: its portions are the stages


@pytest.mark.slow
def test_installing_beside_hugging_face_datasets_leaves_it_theirs(wheel, tmp_path):
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(site), HF_DATASETS, str(wheel), cwd=tmp_path)
    probe = (
        "import importlib.util as u, sys; sys.path.insert(0, sys.argv[1]); "
        "print(u.find_spec('datasets').origin); "
        "print([n for n in ('models', 'bench', 'workflows', 'serving', 'sources') if u.find_spec(n)]); "
        "print(u.find_spec('ncf.models').origin)"
    )
    # -I -S: neither this checkout (the working directory) nor the editable install is on the path
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    origin, claimed, ours = proc.stdout.split("\n")[:3]
    assert origin == str(site / "datasets" / "__init__.py")
    assert "huggingface" in (site / "datasets" / "__init__.py").read_text().lower()
    assert claimed == "[]"
    assert ours == str(site / "ncf" / "models" / "__init__.py")
