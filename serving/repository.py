"""Write exported artifacts into a Triton model repository as a new version; switch a live server.

Each ``ncf export`` writes version ``N + 1`` of every model (``N``: the newest exported version in
the repository, 0 for a new one): ``<repo>/<model>/<N + 1>/`` is built beside itself (the python
model files copied in, the shared ``artifact_check.py`` and ``retrieval.py`` (from
``serving/retrieval.py``) beside a python ``model.py``, the
artifacts hard-linked from one staging copy, ``manifest.json`` last) and renamed into place
(``ncf.core.atomic.atomic_dir``), so the server never sees new weights with an old manifest. All models
of one export share the version number and the manifest's ``export_id``.

A running server (explicit model control, ``version_policy`` latest 1) then switches with
``activate_version``: a model another one calls (``recommend`` calls its scorer with its own
version number; the ensemble ``ncf`` calls ``workflow`` then ``neumf``) first gets both versions
loaded, the callers switch (the ensemble pinned to its steps' versions, then moved to every new
one in one load), and only once their old versions are unloaded does the callee drop its old one;
every request is answered by one export's artifacts. ``prune_versions`` then removes all but the newest ``keep`` versions.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ncf.core import atomic, names
from ncf.core.digest import sha256_bytes, sha256_file
from ncf.core.errors import ServerError

# The committed python models live in this version folder of the project's triton_repo/.
DEFINITION_VERSION = "1"
KEEP_VERSIONS = 2  # the serving version and the one before it stay on disk

# Which artifacts each model's version folder holds. The ensemble holds none (Triton still wants
# the folder).
MODEL_ARTIFACTS: dict[str, tuple[str, ...]] = {
    names.MODEL_NEUMF: (names.ARTIFACT_TORCHSCRIPT, names.ARTIFACT_ONNX),
    names.MODEL_NEUMF_LIBTORCH: (names.ARTIFACT_TORCHSCRIPT,),
    names.MODEL_NEUMF_ONNX: (names.ARTIFACT_ONNX,),
    names.MODEL_CATALOGUE: (names.ARTIFACT_CATALOGUE,),
    names.MODEL_CATALOGUE_LIBTORCH: (names.ARTIFACT_CATALOGUE,),
    names.MODEL_WORKFLOW: (names.ARTIFACT_VOCAB,),
    names.MODEL_RECOMMEND: (
        names.ARTIFACT_VOCAB,
        names.ARTIFACT_SEEN,
        names.ARTIFACT_POPULARITY,
        names.ARTIFACT_GMF,
        names.ARTIFACT_FOLDIN,
    ),
    names.MODEL_ENSEMBLE: (),
}


# The one source of the shared module that the python models import as ``retrieval``.
RETRIEVAL_SOURCE = Path(__file__).resolve().parent / "retrieval.py"
# Files export copies beside every python model.py (never committed there).
HELPER_NAMES = (names.PYTHON_MODEL_HELPER, RETRIEVAL_SOURCE.name)


def python_helpers(template: Path) -> list[Path]:
    """The sources of the files copied beside every python ``model.py``: ``artifact_check.py``
    (the template's, else the project's) and ``serving/retrieval.py``."""
    helper = template / names.PYTHON_MODEL_HELPER
    helper = helper if helper.is_file() else project_repo() / names.PYTHON_MODEL_HELPER
    return [helper, RETRIEVAL_SOURCE]


def project_repo() -> Path:
    """The committed ``triton_repo/`` of this project (configs and python models)."""
    return Path(__file__).resolve().parents[1] / "triton_repo"


def is_export(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is a version folder ``ncf export`` wrote: its ``manifest.json`` is an
    export manifest (``model``, ``version`` and ``export_id``). Only such folders are ever pruned
    or replaced."""
    manifest = Path(folder) / names.MANIFEST_FILE
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and {"model", "version", "export_id"} <= doc.keys()


def is_definition(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is a python model's definition folder: ``1/`` holding only source files
    (the committed one, or its copy in a new repository, with the ``__pycache__`` a server may
    have left). The export fills it; nothing in it is lost."""
    return Path(folder).name == DEFINITION_VERSION and all(
        (p.is_file() and p.suffix == ".py") or (p.is_dir() and p.name == "__pycache__")
        for p in Path(folder).iterdir()
    )


def versions(model_dir: str | os.PathLike) -> list[int]:
    """Versions ``ncf export`` wrote into a model folder (numeric subfolders holding an export
    manifest), ascending."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    found = [int(p.name) for p in model_dir.iterdir() if p.name.isdigit() and is_export(p)]
    return sorted(found)


def latest_version(model_dir: str | os.PathLike) -> int | None:
    """The newest exported version of a model folder, None if it has none."""
    found = versions(model_dir)
    return found[-1] if found else None


def _numbered(model_dir: Path) -> list[int]:
    """Every numeric subfolder of a model folder that is not an empty python definition."""
    if not model_dir.is_dir():
        return []
    return [
        int(p.name)
        for p in model_dir.iterdir()
        if p.name.isdigit() and p.is_dir() and (is_export(p) or not is_definition(p))
    ]


def next_version(repo: str | os.PathLike) -> int:
    """The version the next export writes: one above every numbered folder of any model (an
    export's or anybody else's, which stays untouched), 1 for a new repository."""
    numbered = [n for m in MODEL_ARTIFACTS for n in _numbered(Path(repo) / m)]
    return max(numbered, default=0) + 1


def check_target(folder: Path) -> None:
    """Raise unless ``folder`` is absent, an earlier export's version or a python definition.

    Raises
    ------
    FileExistsError
        ``folder`` holds something ``ncf export`` did not write; the message names it.
    """
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_dir() and not folder.is_symlink() and (is_export(folder) or is_definition(folder)):
        return
    shown = sorted(p.name for p in folder.iterdir())[:5] if folder.is_dir() else []
    what = f"a folder holding {', '.join(shown)}" if shown else "not a folder"
    raise FileExistsError(
        f"{folder} is {what}, not a version `ncf export` wrote (no export manifest.json): "
        "move it out of the repository, or export into another --repo"
    )


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
        (repo / model).mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / "config.pbtxt", repo / model / "config.pbtxt")
        if (src / "configs").is_dir():
            shutil.copytree(src / "configs", repo / model / "configs", dirs_exist_ok=True)
        python_files = list((src / DEFINITION_VERSION).glob("*.py"))
        if python_files:
            (repo / model / DEFINITION_VERSION).mkdir(exist_ok=True)
        for py in python_files:
            shutil.copy2(py, repo / model / DEFINITION_VERSION / py.name)


def _definition_dir(model_dir: Path, template: Path) -> Path | None:
    """Where the python model files of a new version come from: the project's committed folder
    for the project's own repository, else the repository's newest version folder holding them
    (its own definitions), else the template's."""
    if model_dir.parent.resolve() != project_repo().resolve():
        numbered = sorted(
            (int(p.name), p) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit()
        )
        for _, folder in reversed(numbered):  # only what an export or the definitions wrote
            if (is_export(folder) or is_definition(folder)) and list(folder.glob("*.py")):
                return folder
    src = template / model_dir.name / DEFINITION_VERSION
    return src if src.is_dir() else None


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
    version: int | None = None,
) -> dict[str, dict]:
    """Write ``artifacts`` (file name -> bytes) into a new version folder of every model.

    Parameters
    ----------
    repo
        Model repository; models without a ``config.pbtxt`` get the committed definitions from
        ``template`` (default: this project's ``triton_repo/``).
    artifacts
        Must hold every file named in ``MODEL_ARTIFACTS``.
    manifest
        Common manifest fields (ids, source, checks, export_id); each folder's ``manifest.json``
        adds ``model``, ``version`` and ``artifacts`` {file: {sha256, bytes}}.
    version
        Version folder to write; default ``next_version(repo)``.

    Returns
    -------
    dict
        model -> the manifest written for it.
    """
    repo = Path(repo)
    repo.mkdir(parents=True, exist_ok=True)
    template = Path(template) if template else project_repo()
    ensure_definitions(repo, template)
    version = next_version(repo) if version is None else version
    helpers = python_helpers(template)
    for model in MODEL_ARTIFACTS:  # every target checked before anything is written
        check_target(repo / model / str(version))
    atomic.clean_stale(repo / "export")  # the .tmp-export-* staging folder of a killed export
    for model in MODEL_ARTIFACTS:  # and the half-built version folders it left
        for old in range(1, version + 1):
            atomic.clean_stale(repo / model / str(old))
    staging = Path(tempfile.mkdtemp(prefix=".tmp-export-", dir=repo))
    try:
        files = {}
        for name, data in artifacts.items():
            atomic.write_bytes(staging / name, data)
            (staging / name).chmod(0o644)  # mkstemp made it 0600; a serving container must read it
            files[name] = {"sha256": sha256_bytes(data), "bytes": len(data)}
        written = {}
        for model, wanted in MODEL_ARTIFACTS.items():
            entry = {**manifest, "model": model, "version": version}
            entry["artifacts"] = {f: files[f] for f in wanted}
            source = _definition_dir(repo / model, template)
            written[model] = _write_version(
                repo / model / str(version), staging, source, entry, helpers
            )
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_version(
    target: Path, staging: Path, source: Path | None, manifest: dict, helpers: list[Path]
) -> dict:
    with atomic.atomic_dir(target, overwrite=True) as tmp:
        tmp.chmod(0o755)  # mkdtemp made it 0700
        for py in source.glob("*.py") if source is not None else ():  # the python model
            if py.name not in HELPER_NAMES:
                shutil.copy2(py, tmp / py.name)
        if (tmp / "model.py").is_file():  # always the current helpers, never a stale copy
            for helper in helpers:
                shutil.copy2(helper, tmp / helper.name)
            digests = {h.name: {"sha256": sha256_file(tmp / h.name)} for h in helpers}
            manifest = {**manifest, "helpers": digests}
        for name in manifest["artifacts"]:
            _link_or_copy(staging / name, tmp / name)
        atomic.write_json(tmp / names.MANIFEST_FILE, manifest)
        (tmp / names.MANIFEST_FILE).chmod(0o644)
    return manifest


def prune_versions(repo: str | os.PathLike, keep: int = KEEP_VERSIONS) -> list[Path]:
    """Remove all but the newest ``keep`` exported versions of every model; the removed folders.

    In the project's own ``triton_repo/`` the committed folder (``1/``) stays with its python
    model files; only what export wrote into it goes.
    """
    if keep < 1:
        raise ValueError(f"keep={keep}: at least the serving version must stay (>= 1)")
    repo = Path(repo)
    committed = repo.resolve() == project_repo().resolve()
    removed = []
    for model in MODEL_ARTIFACTS:
        for old in versions(repo / model)[:-keep]:
            folder = repo / model / str(old)
            if committed and folder.name == DEFINITION_VERSION:
                for path in folder.iterdir():
                    if path.suffix != ".py" or path.name in HELPER_NAMES:
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
            else:
                shutil.rmtree(folder)
            removed.append(folder)
    return removed


# -- switching a running server --------------------------------------------------------------


def _ready_versions(client) -> dict[str, set[int]]:
    """model -> versions in state READY, from the server's repository index."""
    ready: dict[str, set[int]] = {}
    for entry in client.get_model_repository_index():
        if entry.get("state") == "READY" and entry.get("version"):
            ready.setdefault(entry["name"], set()).add(int(entry["version"]))
    return ready


def _pinned_callees(client, loaded: dict[str, set[int]]) -> set[str]:
    """Loaded models that a loaded python model calls by pinned version (``scorer_model``)."""
    callees = set()
    for model in loaded:
        params = client.get_model_config(model).get("parameters", {})
        callee = params.get("scorer_model", {}).get("string_value")
        if callee in loaded:
            callees.add(callee)
    return callees


def _wait_unloaded(client, models: set[str], version: int, deadline: float) -> None:
    """Wait until no version but ``version`` of ``models`` is READY (in-flight requests done)."""
    while True:
        ready = _ready_versions(client)
        left = {m: ready.get(m, set()) - {version} for m in models}
        if not any(left.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"old versions still loaded after the switch: {left}")
        time.sleep(0.05)


def _steps(config: dict) -> set[str]:
    """The models an ensemble config calls."""
    return {step["model_name"] for step in config.get("ensemble_scheduling", {}).get("step", [])}


def _pinned(config: dict, versions: dict[str, int]) -> dict:
    """An ensemble config whose steps call ``versions[model]`` (-1: the latest loaded)."""
    scheduling = config["ensemble_scheduling"]
    steps = [{**s, "model_version": versions.get(s["model_name"], -1)} for s in scheduling["step"]]
    return {**config, "ensemble_scheduling": {**scheduling, "step": steps}}


def _with_versions(config: dict, versions: list[int] | None) -> dict:
    """``config`` serving exactly ``versions``, or (None) the repository's policy: latest 1."""
    policy = {"specific": {"versions": versions}} if versions else {"latest": {"num_versions": 1}}
    return {**config, "version_policy": policy}


def _committed(config: dict) -> dict:
    """What the repository's config.pbtxt says (every model: latest 1; ensembles call the latest
    versions), whatever override an earlier switch left on the server."""
    config = _with_versions(config, None)
    return _pinned(config, {}) if "ensemble_scheduling" in config else config


def _load(client, model: str, config: dict) -> None:
    """Load ``model`` under ``config``.

    An ensemble step whose new version this load brings up is loaded twice by the caller
    (``activate_version``): the python backend writes bytecode (``__pycache__``) into the
    version folder it loads, Triton counts any file newer than the model's last load as a change,
    and loading an ensemble reloads its changed steps from their config.pbtxt (latest 1), which
    would drop the old version while the old ensemble still calls it. The second load takes the
    change under this config, so the ensemble's own load finds its steps unchanged
    (docs/FACTS.md).
    """
    client.load_model(model, config=json.dumps(config))


def activate_version(url: str, version: int, timeout: float = 600.0) -> dict[str, list[int]]:
    """Switch the server at ``url`` (HTTP, explicit model control) to ``version`` of every model
    it has loaded, without a failed or mixed request; returns model -> versions loaded before.

    Every model that another calls (an ensemble's steps, a python model's pinned scorer) is
    served in both versions while its callers switch. Each ensemble is first pinned to the
    versions it calls now, then moved to ``version`` of every step in one load, so no request
    pairs one export's vocabulary with another's network. Last, every model goes back to the
    repository's own config (latest 1), so no override outlives the switch.

    Raises
    ------
    ServerError
        The server refused a request (a model failed to load): the message says which versions
        it serves then.
    TimeoutError
        Old versions were still loaded ``timeout`` seconds after the start.
    """
    from tritonclient.utils import InferenceServerException

    deadline = time.monotonic() + timeout
    client = _client(url, timeout)
    before: dict[str, set[int]] = {}
    try:
        try:
            before = _ready_versions(client)
            configs = {m: _committed(client.get_model_config(m)) for m in before}
            ensembles = {m for m, c in configs.items() if c.get("platform") == "ensemble"}
            steps = set().union(*(_steps(configs[e]) for e in ensembles)) & set(before)
            callees = _pinned_callees(client, before) | steps
            _pin_ensembles(client, configs, ensembles, {m: max(before[m]) for m in steps})
            for callee in sorted(callees):  # old and new side by side while callers switch
                both = _with_versions(configs[callee], sorted(before[callee] | {version}))
                _load(client, callee, both)
                if callee in steps:  # twice: see _load
                    _load(client, callee, both)
            for model in sorted(set(before) - callees - ensembles):
                client.load_model(model)
            for model in sorted(ensembles):  # every step at once
                _load(client, model, _pinned(configs[model], {m: version for m in steps}))
            _wait_unloaded(client, set(before) - callees, version, deadline)
            for model in [*sorted(callees), *sorted(ensembles)]:  # the old versions go
                _load(client, model, configs[model])
            _wait_unloaded(client, callees, version, deadline)
        except InferenceServerException as exc:
            raise ServerError(_switch_failed(client, url, version, before, exc)) from None
        return {m: sorted(v) for m, v in before.items()}
    finally:
        client.close()


def check_server(url: str, timeout: float = 30.0) -> None:
    """Refuse a server at ``url`` that does not answer, before anything is written for it.

    Raises
    ------
    ServerError
        Nothing answers at ``url``, or not as a tritonserver does.
    """
    from tritonclient.utils import InferenceServerException

    client = _client(url, timeout)
    try:
        client.get_model_repository_index()
    except (InferenceServerException, OSError) as exc:
        raise ServerError(
            f"no tritonserver answers at {url} ({_reason(exc)}); start it (ncf serve) or fix "
            "--server-url; nothing was written"
        ) from None
    finally:
        client.close()


def _client(url: str, timeout: float):
    import tritonclient.http as http

    return http.InferenceServerClient(url, network_timeout=timeout, connection_timeout=timeout)


def _reason(exc: BaseException) -> str:
    """The server's message (an InferenceServerException's repr is empty) or the OS error."""
    message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
    return (str(message).strip().splitlines() or [type(exc).__name__])[0]


def _switch_failed(client, url: str, version: int, before: dict, exc: BaseException) -> str:
    """The one line for a switch the server refused: its reason and what it serves now."""
    try:
        now = {m: sorted(v) for m, v in sorted(_ready_versions(client).items())}
    except Exception:  # noqa: BLE001 (the server may be gone; the first error is the finding)
        now = "unknown (the server does not answer)"
    return (
        f"switching {url} to version {version} failed: {_reason(exc)}; it serves {now} (before: "
        f"{ {m: sorted(v) for m, v in sorted(before.items())} }); version {version} stays on disk: "
        "see the server's log, fix the cause and export again"
    )


def _pin_ensembles(client, configs: dict, ensembles: set[str], now: dict[str, int]) -> None:
    """Pin each ensemble to the versions its steps serve ``now``. Loading an ensemble loads its
    steps under their configs, and the new version folders are already on disk: the steps are
    first held to their serving version, so the ensemble's load cannot move them."""
    for step, served in sorted(now.items()):
        _load(client, step, _with_versions(configs[step], [served]))
    for model in sorted(ensembles):
        _load(client, model, _pinned(configs[model], now))
