"""``ncf train --init-from CHECKPOINT``: a new run that starts from a previous run's model.

The new ETL output must number ids as the checkpoint's did: the same output, or one made with
``ncf etl --vocab-from`` that output (its ``metadata.json`` ``vocab_from``), whose vocabularies
keep every old id and append new users and items after them. The embedding tables then grow: the
first rows are the checkpoint's, the new rows keep the fresh model's initialisation (the run's
seed), and every other tensor is the checkpoint's. Adam starts afresh (its moments are not
carried over), and so do the epochs, the schedule and the selection of the kept epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ncf.models import checkpoint
from ncf.models.data import EtlData


def check_numbering(path: Path, state: dict[str, Any], data: EtlData) -> None:
    """Raise ValueError unless ``data`` numbers ids as the checkpoint's ETL output did."""
    trained_on = state.get("data", {})
    sha = trained_on.get("metadata_sha256")
    continued = (data.metadata.get("vocab_from") or {}).get("metadata_sha256")
    if sha is not None and sha in (data.metadata_sha256, continued):
        return
    raise ValueError(
        f"--init-from {path}: was trained on {trained_on.get('etl_dir')}, and --data "
        f"{data.path} does not continue its ids; make --data with `ncf etl --vocab-from "
        f"{trained_on.get('etl_dir')}` (or train on that output)"
    )


def grown(path: Path, old: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor]) -> dict:
    """``fresh``'s state dict with ``old``'s values: equal shapes copied, tables of more rows
    (``[n_old, ...]`` into ``[n_new, ...]``, ``n_new >= n_old``) filled on their first rows."""
    missing = sorted(set(fresh) ^ set(old))
    if missing:
        raise ValueError(
            f"--init-from {path}: holds another architecture (tensors {missing[:4]} differ); "
            "pass the model flags of that run (--model, --factors, --layers, --towers)"
        )
    out = {}
    for name, new in fresh.items():
        prev = old[name].to(new.device, new.dtype)
        if prev.shape == new.shape:
            out[name] = prev.clone()
        elif prev.dim() == new.dim() and prev.shape[1:] == new.shape[1:] and len(prev) < len(new):
            out[name] = torch.cat((prev, new[len(prev) :]))
        else:
            raise ValueError(
                f"--init-from {path}: {name} is {list(prev.shape)} there and {list(new.shape)} "
                "here; pass the model flags of that run, and --data continuing its ids"
            )
    return out


def start_from(
    path: Path, data: EtlData, model: torch.nn.Module, kind: str
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The weights ``model`` (freshly initialised for ``data``) starts from, and where they come
    from (for metrics.json): checkpoint, its epoch and ETL output, users and items before/after."""
    state = checkpoint.load(path, map_location="cpu")
    if checkpoint.model_kind(state) != kind:
        raise ValueError(
            f"--init-from {path}: holds a {checkpoint.model_kind(state)!r} model and this run "
            f"trains {kind!r}; pass --model {checkpoint.model_kind(state)}"
        )
    check_numbering(path, state, data)
    weights = grown(path, state["model"], model.state_dict())
    cfg = state["config"]
    about = {
        "checkpoint": str(path.resolve()),
        "epoch": int(state["epoch"]),
        "etl_dir": state.get("data", {}).get("etl_dir"),
        "users": [int(cfg["num_users"]), data.num_users],
        "items": [int(cfg["num_items"]), data.num_items],
    }
    return weights, about
