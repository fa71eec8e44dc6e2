"""``ncf etl --vocab-from PREVIOUS``: a previous ETL output's model ids, kept, with new ids after.

A retrain on yesterday's ratings plus today's must not renumber: every raw id the previous
output knew keeps its model id, and the ids it did not know follow the last of them, in the order
this run's engine gives them (Categorify's frequency order, or ascending raw id for
``--engine pandas``). Ids of the previous vocabulary that the new input lacks keep their rows, so
a model trained on the previous output indexes the new one unchanged (``ncf train --init-from``).
Out-of-vocabulary ids are served as before (Categorify's OOV id 2; no id with the pandas engine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ncf.core import textfile
from ncf.core.digest import sha256_file
from ncf.core.names import METADATA_FILE
from ncf.workflows import metadata as md
from ncf.workflows.backend import array_module
from ncf.workflows.encoding import Encoding, Vocabulary

KINDS = ("user", "item")


def check_previous(etl_dir: Path, engine: str) -> Encoding:
    """The vocabularies of the previous output ``etl_dir``, read before this run reads its input.

    Raises
    ------
    ValueError
        ``etl_dir`` is not an ``ncf etl`` output of ``engine`` (the two engines number ids
        differently), or its vocabularies are missing or unreadable.
    """
    meta = md.read_metadata(etl_dir)
    if meta is None or not md.is_etl_output(etl_dir):
        raise ValueError(
            f"--vocab-from {etl_dir}: not an `ncf etl` output (no readable {METADATA_FILE}); "
            "pass the previous run's ETL folder"
        )
    if meta.get("engine") != engine:
        raise ValueError(
            f"--vocab-from {etl_dir} was made with --engine {meta.get('engine')} and this run "
            f"uses --engine {engine}: the engines number ids differently; use --engine "
            f"{meta.get('engine')}"
        )
    try:
        return read_encoding(etl_dir, meta)
    except (KeyError, OSError) as exc:
        raise ValueError(
            f"--vocab-from {etl_dir}: its vocabularies cannot be read ({exc!r}); rebuild it with "
            "this version's `ncf etl`"
        ) from None


def previous_sha256(etl_dir: Path) -> str:
    """sha256 of the previous output's metadata.json: what this output was numbered after."""
    return sha256_file(etl_dir / METADATA_FILE)


def read_encoding(etl_dir: Path, meta: dict[str, Any]) -> Encoding:
    """The user and item vocabularies of an ETL output (its vocab files, model-id order), given
    its ``metadata.json`` ``meta``."""
    vocabs = {}
    for kind in KINDS:
        path = etl_dir / meta["vocab"][kind]
        column, lo = meta["vocab_columns"][kind], int(meta["vocab_first_id"][kind])
        frame = pq.read_table(path, columns=[column]).to_pandas()
        ids = frame.index.to_numpy()
        if not np.array_equal(ids, np.arange(lo, lo + len(ids))):
            raise ValueError(
                f"--vocab-from {etl_dir}: {path} is not one model-id range from {lo} "
                "(edited by hand?); rebuild the previous output with `ncf etl`"
            )
        raw = frame[column].to_numpy(np.int64)
        vocabs[kind] = Vocabulary(raw=raw, lo=lo, cardinality=lo + raw.size)
    return Encoding(user=vocabs["user"], item=vocabs["item"], engine=str(meta.get("engine")))


def extend(previous: Vocabulary, current: Vocabulary) -> Vocabulary:
    """``previous`` with the ids of ``current`` it lacks appended, in ``current``'s order.

    Each previous raw id keeps its model id ``lo + position``; the new ones are dense after
    ``previous.hi``.
    """
    xp: Any = array_module(current.raw)
    old = xp.asarray(previous.raw)
    new = current.raw[~xp.isin(current.raw, old)]
    raw = xp.concatenate([old, new.astype(old.dtype)])
    return Vocabulary(raw=raw, lo=previous.lo, cardinality=previous.lo + int(raw.size))


def extended_encoding(previous: Encoding, current: Encoding) -> Encoding:
    """This run's encoding (``current``) renumbered after ``previous`` (the same engine's)."""
    return Encoding(
        user=extend(previous.user, current.user),
        item=extend(previous.item, current.item),
        engine=current.engine,
    )


def provenance(etl_dir: Path) -> dict[str, Any]:
    """metadata.json's ``vocab_from``: which output the ids continue, and how many it had."""
    meta = textfile.read_json(etl_dir / METADATA_FILE)
    return {
        "path": str(etl_dir.resolve()),
        "metadata_sha256": previous_sha256(etl_dir),
        "n_users": int(meta["n_users"]),
        "n_items": int(meta["n_items"]),
    }
