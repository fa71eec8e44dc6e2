"""Write exported artifacts into a Triton model repository: each version folder atomically.

A version folder ``<repo>/<model>/1/`` is rebuilt beside itself (its committed ``*.py`` files
carried over, the shared ``artifact_check.py`` copied beside a python ``model.py``, the artifacts
hard-linked from one staging copy, ``manifest.json`` last) and renamed into place
(``ncf.atomic.atomic_dir``), so the server never sees new weights with an old manifest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ncf import atomic, names
from ncf.digest import sha256_bytes, sha256_file

VERSION = "1"

# Which artifacts each model's version folder holds. The ensemble holds none (Triton still wants
# the folder).
MODEL_ARTIFACTS: dict[str, tuple[str, ...]] = {
    names.MODEL_NEUMF: (names.ARTIFACT_TORCHSCRIPT, names.ARTIFACT_ONNX),
    names.MODEL_NEUMF_LIBTORCH: (names.ARTIFACT_TORCHSCRIPT,),
    names.MODEL_NEUMF_ONNX: (names.ARTIFACT_ONNX,),
    names.MODEL_CATALOGUE: (names.ARTIFACT_CATALOGUE,),
    names.MODEL_CATALOGUE_LIBTORCH: (names.ARTIFACT_CATALOGUE,),
    names.MODEL_WORKFLOW: (names.ARTIFACT_VOCAB,),
    names.MODEL_RECOMMEND: (names.ARTIFACT_VOCAB, names.ARTIFACT_SEEN),
    names.MODEL_ENSEMBLE: (),
}


def project_repo() -> Path:
    """The committed ``triton_repo/`` of this project (configs and python models)."""
    return Path(__file__).resolve().parents[1] / "triton_repo"


def ensure_definitions(repo: Path, template: Path) -> None:
    """Copy the committed definitions (config.pbtxt, configs/, 1/*.py) of models ``repo`` lacks."""
    if repo.resolve() == template.resolve():
        return
    for model in MODEL_ARTIFACTS:
        if (repo / model / "config.pbtxt").is_file():
            continue
        src = template / model
        if not (src / "config.pbtxt").is_file():
            raise FileNotFoundError(f"{src}/config.pbtxt not found: pass --template triton_repo")
        (repo / model / VERSION).mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / "config.pbtxt", repo / model / "config.pbtxt")
        if (src / "configs").is_dir():
            shutil.copytree(src / "configs", repo / model / "configs", dirs_exist_ok=True)
        for py in (src / VERSION).glob("*.py"):
            shutil.copy2(py, repo / model / VERSION / py.name)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # same file system: no second copy of the weights
    except OSError:
        shutil.copy2(src, dst)


def write_repository(
    repo: str | os.PathLike,
    artifacts: Mapping[str, bytes],
    manifest: dict,
    template: str | os.PathLike | None = None,
) -> dict[str, dict]:
    """Write ``artifacts`` (file name -> bytes) into every model's version folder of ``repo``.

    Parameters
    ----------
    repo
        Model repository; models without a ``config.pbtxt`` get the committed definitions from
        ``template`` (default: this project's ``triton_repo/``).
    artifacts
        Must hold every file named in ``MODEL_ARTIFACTS``.
    manifest
        Common manifest fields (ids, source, checks); each folder's ``manifest.json`` adds
        ``model`` and ``artifacts`` {file: {sha256, bytes}}.

    Returns
    -------
    dict
        model -> the manifest written for it.
    """
    repo = Path(repo)
    repo.mkdir(parents=True, exist_ok=True)
    template = Path(template) if template else project_repo()
    ensure_definitions(repo, template)
    helper = template / names.PYTHON_MODEL_HELPER
    helper = helper if helper.is_file() else project_repo() / names.PYTHON_MODEL_HELPER
    atomic.clean_stale(repo / "export")  # the .tmp-export-* staging folder of a killed export
    staging = Path(tempfile.mkdtemp(prefix=".tmp-export-", dir=repo))
    try:
        files = {}
        for name, data in artifacts.items():
            atomic.write_bytes(staging / name, data)
            (staging / name).chmod(0o644)  # mkstemp made it 0600; a serving container must read it
            files[name] = {"sha256": sha256_bytes(data), "bytes": len(data)}
        written = {}
        for model, wanted in MODEL_ARTIFACTS.items():
            written[model] = _write_version(
                repo / model / VERSION, staging, wanted, files, model, manifest, helper
            )
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_version(
    target: Path,
    staging: Path,
    wanted: tuple[str, ...],
    files: dict,
    model: str,
    manifest: dict,
    helper: Path,
) -> dict:
    model_manifest = {**manifest, "model": model, "artifacts": {f: files[f] for f in wanted}}
    with atomic.atomic_dir(target, overwrite=True) as tmp:
        tmp.chmod(0o755)  # mkdtemp made it 0700
        if target.is_dir():
            for py in target.glob("*.py"):  # the committed python model
                shutil.copy2(py, tmp / py.name)
        if (tmp / "model.py").is_file():  # always the current helper, never a stale copy
            shutil.copy2(helper, tmp / helper.name)
            model_manifest["helpers"] = {helper.name: {"sha256": sha256_file(tmp / helper.name)}}
        for name in wanted:
            _link_or_copy(staging / name, tmp / name)
        atomic.write_json(tmp / names.MANIFEST_FILE, model_manifest)
        (tmp / names.MANIFEST_FILE).chmod(0o644)
    return model_manifest
