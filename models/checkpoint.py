"""Checkpoints: atomic writes, a sha256 manifest beside them, ``weights_only`` loading, RNG state.

Every file is written with one rename (``ncf.core.atomic``), so a killed writer leaves the previous
complete checkpoint. ``checkpoints.json`` records each checkpoint's sha256; it is rewritten around
each checkpoint write in two steps (first allowing the old and the new digest, then only the new),
so at every moment each checkpoint on disk matches a digest listed for it.
"""

from __future__ import annotations

import io
import pickle
import re
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ncf.core import textfile
from ncf.core.atomic import write_bytes, write_json
from ncf.core.digest import sha256_bytes, sha256_file
from ncf.models.kinds import DEFAULT_KIND, MODELS, build_model

MANIFEST = "checkpoints.json"
BEST = "best.pt"
LAST = "last.pt"


def read_manifest(run_dir: str | Path) -> dict[str, dict]:
    """The manifest of ``run_dir`` (empty if none yet)."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    return textfile.read_json(path)


def save(path: str | Path, state: dict[str, Any]) -> str:
    """Write ``state`` to ``path`` atomically and record its sha256 in the manifest; returns it."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    digest = sha256_bytes(data)
    manifest = read_manifest(path.parent)
    old = manifest.get(path.name, {})
    # Phase 1: whatever file is on disk now (listed before) or the new one verifies.
    allowed = [d for d in old.get("allowed", [old.get("sha256")]) if d] + [digest]
    manifest[path.name] = {**old, "allowed": allowed}
    write_json(path.parent / MANIFEST, manifest)
    write_bytes(path, data)
    manifest[path.name] = {
        "sha256": digest,
        "allowed": [digest],
        "bytes": len(data),
        "epoch": state.get("epoch"),
        "written": time.time(),
    }
    write_json(path.parent / MANIFEST, manifest)
    return digest


def verify(path: str | Path) -> str:
    """Check ``path`` against its manifest entry; returns its sha256.

    Raises
    ------
    ValueError
        If the manifest has no entry for it or the digest is not one it lists.
    """
    path = Path(path)
    entry = read_manifest(path.parent).get(path.name)
    if entry is None:
        raise ValueError(
            f"{path}: not listed in {path.parent / MANIFEST}; was it written by `ncf train`?"
        )
    digest = sha256_file(path)
    if digest not in entry.get("allowed", [entry.get("sha256")]):
        raise ValueError(
            f"{path}: sha256 {digest[:12]}... does not match {MANIFEST} ({entry.get('sha256', '')[:12]}...); "
            "the file is corrupt or was replaced: retrain or restore it"
        )
    return digest


def load(
    path: str | Path, map_location: str | torch.device = "cpu", check: bool = True
) -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)``, verified against its manifest.

    Parameters
    ----------
    path
        ``RUN/best.pt`` or ``RUN/last.pt`` of ``ncf train``.
    map_location
        Where the tensors go.
    check
        Verify the sha256 against ``checkpoints.json`` when one sits beside the file.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        One line naming the file, what is wrong with it and the fix: a digest mismatch, a truncated
        or non-torch file, pickled objects that ``weights_only`` loading refuses, missing entries.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such checkpoint (written by `ncf train --out RUN` as RUN/{BEST})"
        )
    if check and (path.parent / MANIFEST).exists():
        verify(path)
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a cut file has no directory
        raise ValueError(
            f"{path}: not a readable torch checkpoint, truncated or corrupt (no zip directory at "
            "its end); re-run `ncf train` or restore the file"
        )
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refuses code objects and callables
        found = re.search(r"GLOBAL [\w.]+", str(exc))  # the refused object, where torch names it
        what = f" ({found.group(0)})" if found else ""
        raise ValueError(
            f"{path}: holds pickled objects other than tensors and plain containers{what}, which "
            "are not loaded for safety; use a checkpoint written by `ncf train`"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:  # zip/stream errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{path}: not a readable torch checkpoint, truncated or corrupt ({first[:160]}); "
            "re-run `ncf train` or restore the file"
        ) from None
    if not isinstance(state, dict):
        raise ValueError(
            f"{path}: holds a {type(state).__name__}, not a checkpoint dict; use RUN/{BEST} of "
            "`ncf train`"
        )
    for key in ("model", "config", "epoch"):
        if key not in state:
            raise ValueError(f"{path}: no {key!r} entry; not an `ncf train` checkpoint")
    return state


def resumable(path: str | Path) -> str | None:
    """Why ``path`` (a ``last.pt``) cannot be resumed from (missing, corrupt, truncated, no
    optimizer or RNG state), or None when it can."""
    path = Path(path)
    if not path.exists():
        return "missing"
    try:
        state = load(path)
    except (ValueError, OSError) as exc:
        return str(exc)
    lacks = [k for k in ("optimizer", "rng") if k not in state]
    return f"{path}: holds no {' or '.join(lacks)} state" if lacks else None


def model_kind(state: dict[str, Any]) -> str:
    """The model kind a checkpoint records (``train_config["model"]``; NeuMF before MF existed)."""
    return str(state.get("train_config", {}).get("model", DEFAULT_KIND))


def load_model(
    path: str | Path,
    map_location: str | torch.device = "cpu",
    check: bool = True,
    kinds: tuple[str, ...] = tuple(MODELS),
) -> tuple[nn.Module, dict[str, Any]]:
    """The model a checkpoint describes (NeuMF or MF), its weights loaded, in eval mode; and the
    checkpoint.

    Raises the errors of ``load``, and ``ValueError`` if the weights do not fit the config or the
    model kind is not one of ``kinds`` (e.g. export takes NeuMF only).
    """
    state = load(path, map_location, check)
    kind = model_kind(state)
    if kind not in kinds:
        raise ValueError(f"{path}: holds a {kind!r} model; this command takes {list(kinds)}")
    weights = unwrapped(state["model"])
    try:
        model = build_model(kind, dict(state["config"]))
        model.load_state_dict(weights)
    except (TypeError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ValueError(
            f"{path}: weights do not match its config {state['config']} ({first[:160]}); "
            "use a checkpoint written by `ncf train`"
        ) from None
    return model.to(map_location).eval(), state


def unwrapped(weights: dict[str, Any]) -> dict[str, Any]:
    """A state dict without the prefixes of a DDP- or torch.compile-wrapped module."""
    weights = dict(weights)
    for prefix in ("module.", "_orig_mod."):
        if weights and all(k.startswith(prefix) for k in weights):
            weights = {k[len(prefix) :]: v for k, v in weights.items()}
    return weights


def rng_state(device: torch.device) -> dict[str, Any]:
    """The global torch RNG states (CPU, and this rank's GPU)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what ``rng_state`` captured."""
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def snapshot(obj: Any) -> Any:
    """A CPU copy of every tensor in a nested dict/list (training may go on modifying the originals)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v) for v in obj)
    return obj


class BackgroundSaver:
    """Writes checkpoints in a thread so that training continues meanwhile (one write at a time).

    ``submit`` waits for the previous write, then starts saving a snapshot; ``wait`` re-raises a
    failed write. Each write is as atomic as ``save`` is.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, jobs: list[tuple[Path, dict]]) -> None:
        try:
            for path, state in jobs:
                save(path, state)
        except BaseException as exc:  # noqa: BLE001 (re-raised in wait())
            self._error = exc

    def submit(self, jobs: list[tuple[Path, dict]]) -> None:
        """Save each ``(path, state)`` in order, in the background (states are snapshotted now)."""
        self.wait()
        snap = [(Path(p), snapshot(s)) for p, s in jobs]
        self._thread = threading.Thread(
            target=self._run, args=(snap,), name="checkpoint-writer", daemon=False
        )
        self._thread.start()

    def wait(self) -> None:
        """Block until the current write is on disk; raise its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
