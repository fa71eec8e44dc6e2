"""Raw id -> model id encodings (no NVTabular import).

An :class:`Encoding` holds, for users and items, the raw ids in model-id order and the first real
model id. It is produced either by the NVTabular Workflow (``workflows/workflow.py``: Categorify,
which reserves ids 0-2 for padding, nulls and out-of-vocabulary values and orders real values
by frequency) or, with ``--engine pandas``, by sorted-unique factorization (ids from 0, ascending
raw id). Either way: ``model id = lo + position of the raw id in the vocabulary``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ncf.workflows.backend import array_module, dense_codes


@dataclasses.dataclass
class Vocabulary:
    """Raw ids of one column in model-id order: ``raw[k]`` has model id ``lo + k``."""

    raw: Any  # int array [n_real]
    lo: int  # first real model id
    cardinality: int  # embedding rows: every id in [0, cardinality) may be looked up

    @property
    def size(self) -> int:
        return int(self.raw.size)

    @property
    def hi(self) -> int:
        """One past the last real model id."""
        return self.lo + self.size

    def index(self, values: Any) -> Any:
        """Position of each raw id in the vocabulary (``model id - lo``), int32 ``[n]``.

        Every value must be in the vocabulary (the ETL only maps ids it fitted on).
        """
        return lookup(values, self.raw)


@dataclasses.dataclass
class Encoding:
    """User and item vocabularies of one ETL run."""

    user: Vocabulary
    item: Vocabulary
    engine: str  # "nvtabular" or "pandas"


def lookup(values: Any, vocab: Any) -> Any:
    """Position of each of ``values`` in ``vocab`` (distinct ids, any order), int32 ``[n]``.

    Uses a direct-address table when the largest id is small (ML ids are below a few hundred
    thousand: one gather, O(n)), else a binary search over the sorted vocabulary.
    """
    xp = array_module(values, vocab)
    top = int(vocab.max()) if vocab.size else 0
    if top < max(4 * values.size, 1 << 22):
        table = xp.full(top + 1, -1, dtype=xp.int32)
        table[vocab] = xp.arange(vocab.size, dtype=xp.int32)
        return table[values]
    order = xp.argsort(vocab)
    return order[xp.searchsorted(vocab[order], values)].astype(xp.int32)


def sorted_unique_encoding(user: Any, item: Any) -> Encoding:
    """The ``--engine pandas`` encoding: model ids 0..n-1 in ascending raw-id order."""
    _, users = dense_codes(user)
    _, items = dense_codes(item)
    return Encoding(
        user=Vocabulary(raw=users, lo=0, cardinality=int(users.size)),
        item=Vocabulary(raw=items, lo=0, cardinality=int(items.size)),
        engine="pandas",
    )
