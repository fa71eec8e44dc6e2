"""The Merlin schema of every ETL dataset: ``.merlin/schema.json`` beside its parquet files.

``merlin.io.Dataset`` reads a folder's ``.merlin/schema.json`` (TensorFlow Metadata's ``Schema``
as protobuf JSON: what ``Dataset.to_parquet`` writes; its older ``schema.pbtxt`` is deprecated in
merlin-core 23.08) instead of inferring a schema: with it, Merlin's tools find the user and item
columns by their tags and size embedding tables from the domains. The folder's name starts with a
dot, so plain parquet readers (``pyarrow.parquet.read_table(folder)``) skip it. Written here as
JSON (the same for both engines, and without Merlin installed); ``tests/workflows/test_schema.py``
reads it back with ``merlin.io.Dataset`` and iterates it with ``merlin.dataloader.torch.Loader``.
Training reads the domains itself (``ncf.models.data.schema_cardinalities``).

Each of ``user_id`` and ``item_id`` (int64 model ids) carries:

- tags ``categorical``, ``id`` and ``user`` (or ``item``): Merlin's ``Tags.USER_ID`` /
  ``Tags.ITEM_ID`` (each the pair ``ID`` and ``USER`` / ``ITEM``) and ``Tags.CATEGORICAL``;
- ``intDomain`` ``[0, cardinality - 1]`` named after the raw column (``userId`` / ``movieId``),
  ``isCategorical``: every id an embedding table must hold, the reserved low ids included;
- the property ``embedding_sizes.cardinality``, as NVTabular's Categorify reports it.
"""

from __future__ import annotations

from pathlib import Path

from ncf.core.atomic import write_json
from ncf.core.names import ITEM, RAW_ITEM, RAW_USER, SCHEMA_FILE, USER
from ncf.workflows.encoding import Encoding


def _feature(name: str, source: str, kind: str, cardinality: int) -> dict:
    # Protobuf JSON writes int64 fields as strings.
    domain = {"name": source, "min": "0", "max": str(cardinality - 1), "isCategorical": True}
    extra = {
        "embedding_sizes": {"cardinality": float(cardinality)},
        "dtype_item_size": 64.0,
        "is_list": False,
        "is_ragged": False,
    }
    return {
        "name": name,
        "type": "INT",
        "intDomain": domain,
        "annotation": {"tag": ["categorical", "id", kind], "extraMetadata": [extra]},
    }


def schema_document(encoding: Encoding) -> dict:
    """The schema of a dataset of ``user_id``, ``item_id`` under ``encoding``."""
    return {
        "feature": [
            _feature(USER, RAW_USER, "user", encoding.user.cardinality),
            _feature(ITEM, RAW_ITEM, "item", encoding.item.cardinality),
        ]
    }


def write_schemas(out: Path, datasets: list[str], encoding: Encoding) -> None:
    """Write the schema into each dataset folder of ``out``."""
    document = schema_document(encoding)
    for name in datasets:
        path = out / name / SCHEMA_FILE
        path.parent.mkdir(exist_ok=True)
        write_json(path, document)
