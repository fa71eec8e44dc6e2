"""`ncf export` killed mid-way (NCF_FAULT): each version folder is whole, from the previous export
or the new one, and the next export replaces everything and leaves no temporary folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ncf.core import faults, names
from ncf.serving import export
from ncf.serving.repository import MODEL_ARTIFACTS, versions
from tests.triton_repo import etl_fixture

pytestmark = pytest.mark.slow

FAST = [
    "--onnx-exporter",
    "legacy",
    "--check-samples",
    "64",
]  # the dynamo exporter takes twice as long


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """(ETL dir, the previous export's repository, its checkpoint, the checkpoint to export now)."""
    root = tmp_path_factory.mktemp("export-kill")
    ratings = etl_fixture.synthetic_ratings(n_users=40, n_items=60, per_user=12, seed=3)
    etl_dir = etl_fixture.make_etl_dir(root / "etl", ratings)
    old = etl_fixture.make_checkpoint(root / "old.pt", etl_dir, seed=0)
    new = etl_fixture.make_checkpoint(root / "new.pt", etl_dir, seed=1)
    export.export_repository(old, etl_dir, root / "repo", check_samples=64, onnx_exporter="legacy")
    return etl_dir, root / "repo", old, new


def _export(etl_dir: Path, repo: Path, ckpt: Path, fault: str | None) -> int:
    argv = [sys.executable, "-m", "ncf.cli", "export", "--checkpoint", str(ckpt)]
    argv += ["--data", str(etl_dir), "--repo", str(repo), *FAST]
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    env.update({faults.ENV: fault} if fault else {})
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
    return done.returncode


def _version_sources(repo: Path) -> list[str]:
    """The checkpoint sha256 of each model's newest version folder, after checking that every
    version folder on disk holds exactly its manifest's files."""
    sources = []
    for model in MODEL_ARTIFACTS:
        found = versions(repo / model)
        for version in found:
            vdir = repo / model / str(version)
            manifest = json.loads((vdir / names.MANIFEST_FILE).read_text())
            for name, entry in manifest["artifacts"].items():
                assert _sha(vdir / name) == entry["sha256"], f"{vdir / name}: not its manifest's"
        newest = json.loads((repo / model / str(found[-1]) / names.MANIFEST_FILE).read_text())
        sources.append(newest["source"]["checkpoint_sha256"])
    return sources


@pytest.mark.parametrize("commit", [2, 9, 17])
def test_killed_export_leaves_whole_version_folders_and_a_rerun_replaces_them(
    previous, tmp_path, commit
):
    etl_dir, previous_repo, old, new = previous
    repo = shutil.copytree(previous_repo, tmp_path / "repo")
    assert _export(etl_dir, repo, new, f"{faults.ATOMIC_COMMIT}:{commit}") == -signal.SIGKILL
    assert set(_version_sources(repo)) <= {_sha(old), _sha(new)}  # each folder whole, old or new
    assert _export(etl_dir, repo, new, None) == 0
    assert _version_sources(repo) == [_sha(new)] * len(MODEL_ARTIFACTS)
    assert not [p for p in repo.rglob(".tmp-*")], "temporary files of the killed export remain"
