"""``ncf train --init-from CHECKPOINT``: a new run that starts from a previous run's model.

The new ETL output must number ids as the checkpoint's did: the same output, or one made with
``ncf etl --vocab-from`` that output (its ``metadata.json`` ``vocab_from``), whose vocabularies
keep every old id and append new users and items after them. The user and item tables then grow:
the first rows are the checkpoint's, the new rows keep the fresh model's initialisation (the run's
seed), and every other tensor is the checkpoint's. Adam starts afresh (its moments are not
carried over), and so do the epochs, the schedule and the selection of the kept epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ncf.core import textfile
from ncf.core.digest import sha256_file
from ncf.core.names import METADATA_FILE
from ncf.models import checkpoint
from ncf.models.data import EtlData


def check_start(path: Path, data_dir: Path, kind: str) -> dict[str, Any]:
    """The checkpoint at ``path``, checked before the run touches its output folder.

    Parameters
    ----------
    path
        ``RUN/best.pt`` of the previous run.
    data_dir
        This run's ETL output (``--data``).
    kind
        This run's model kind (``--model``).

    Returns
    -------
    dict
        The loaded checkpoint (tensors on the CPU).

    Raises
    ------
    ValueError
        Another model kind, or ``data_dir`` does not continue the checkpoint's ids.
    """
    state = checkpoint.load(path, map_location="cpu")
    if checkpoint.model_kind(state) != kind:
        raise ValueError(
            f"--init-from {path}: holds a {checkpoint.model_kind(state)!r} model and this run "
            f"trains {kind!r}; pass --model {checkpoint.model_kind(state)}"
        )
    trained_on = state.get("data", {})
    meta_path = Path(data_dir) / METADATA_FILE
    meta = textfile.read_json(meta_path)
    continued = (meta.get("vocab_from") or {}).get("metadata_sha256")
    sha = trained_on.get("metadata_sha256")
    if sha is None or sha not in (sha256_file(meta_path), continued):
        raise ValueError(
            f"--init-from {path}: was trained on {trained_on.get('etl_dir')}, and --data "
            f"{data_dir} does not continue its ids; make --data with `ncf etl --vocab-from "
            f"{trained_on.get('etl_dir')}` (or train on that output)"
        )
    return state


def grown(
    path: Path,
    old: dict[str, torch.Tensor],
    fresh: dict[str, torch.Tensor],
    rows: set[tuple[int, int]],
) -> dict[str, torch.Tensor]:
    """``fresh``'s state dict with ``old``'s values.

    Tensors of equal shape are copied; a user or item table (``rows``: its (old, new) row counts,
    for users and for items) is filled on its first rows and keeps ``fresh``'s others.
    Anything else that differs is another architecture: ValueError naming the tensor.
    """
    old = checkpoint.unwrapped(old)
    differ = sorted(set(fresh) ^ set(old))
    if differ:
        raise ValueError(
            f"--init-from {path}: holds another architecture (tensors {differ[:4]} differ); "
            "pass the model flags of that run (--model, --factors, --layers, --towers)"
        )
    out = {}
    for name, new in fresh.items():
        prev = old[name].to(new.device, new.dtype)
        if prev.shape == new.shape:
            out[name] = prev.clone()
        elif prev.shape[1:] == new.shape[1:] and (len(prev), len(new)) in rows:
            out[name] = torch.cat((prev, new[len(prev) :]))
        else:
            raise ValueError(
                f"--init-from {path}: {name} is {list(prev.shape)} there and {list(new.shape)} "
                "here; pass the model flags of that run, and --data continuing its ids"
            )
    return out


def start_from(
    path: Path, state: dict[str, Any], data: EtlData, fresh: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights a model freshly initialised for ``data`` (its state dict ``fresh``, whole
    tables) starts from, and where they come from (metrics.json's ``init_from``: checkpoint, its
    epoch and ETL output, users and items before and after)."""
    cfg = state["config"]
    users, items = [int(cfg["num_users"]), data.num_users], [int(cfg["num_items"]), data.num_items]
    weights = grown(path, state["model"], fresh, {tuple(users), tuple(items)})
    about = {
        "checkpoint": str(path.resolve()),
        "epoch": int(state["epoch"]),
        "etl_dir": state.get("data", {}).get("etl_dir"),
        "users": users,
        "items": items,
    }
    return weights, about
