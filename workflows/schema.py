"""The Merlin schema of every ETL dataset: ``schema.pbtxt`` beside its parquet files.

``merlin.io.Dataset`` reads a folder's ``schema.pbtxt`` (TensorFlow Metadata's ``Schema`` in
protobuf text format, as ``Dataset.to_parquet`` writes it) instead of inferring one: with it,
Merlin's tools find the user and item columns by their tags and size embedding tables from the
domains. Written as text here (the same for both engines, and without Merlin installed);
``tests/workflows/test_schema.py`` reads it back with ``merlin.io.Dataset`` and iterates it with
``merlin.dataloader.torch.Loader``. Training reads the domains itself
(``ncf.models.data.schema_cardinalities``).

Each of ``user_id`` and ``item_id`` (int64 model ids) carries:

- tags ``categorical``, ``id`` and ``user`` (or ``item``): Merlin's ``Tags.USER_ID`` /
  ``Tags.ITEM_ID`` (each a pair of ``ID`` and ``USER`` / ``ITEM``) and ``Tags.CATEGORICAL``;
- ``int_domain`` ``[0, cardinality - 1]`` named after the raw column (``userId`` / ``movieId``),
  ``is_categorical``: every id an embedding table must hold, the reserved low ids included;
- the property ``embedding_sizes.cardinality``, as NVTabular's Categorify reports it.
"""

from __future__ import annotations

from pathlib import Path

from ncf.core.names import ITEM, RAW_ITEM, RAW_USER, SCHEMA_FILE, USER
from ncf.workflows.encoding import Encoding

FEATURE = """feature {{
  name: "{name}"
  type: INT
  int_domain {{
    name: "{source}"
    min: 0
    max: {max}
    is_categorical: true
  }}
  annotation {{
    tag: "categorical"
    tag: "id"
    tag: "{kind}"
    extra_metadata {{
      [type.googleapis.com/google.protobuf.Struct] {{
        fields {{
          key: "embedding_sizes"
          value {{
            struct_value {{
              fields {{
                key: "cardinality"
                value {{
                  number_value: {cardinality}
                }}
              }}
            }}
          }}
        }}
        fields {{
          key: "dtype_item_size"
          value {{
            number_value: 64.0
          }}
        }}
        fields {{
          key: "is_list"
          value {{
            bool_value: false
          }}
        }}
        fields {{
          key: "is_ragged"
          value {{
            bool_value: false
          }}
        }}
      }}
    }}
  }}
}}
"""


def schema_text(encoding: Encoding) -> str:
    """The ``schema.pbtxt`` of a dataset of ``user_id``, ``item_id`` under ``encoding``."""
    features = (
        (USER, RAW_USER, "user", encoding.user.cardinality),
        (ITEM, RAW_ITEM, "item", encoding.item.cardinality),
    )
    return "".join(
        FEATURE.format(name=n, source=s, kind=k, max=c - 1, cardinality=f"{float(c)!r}")
        for n, s, k, c in features
    )


def write_schemas(out: Path, datasets: list[str], encoding: Encoding) -> None:
    """Write ``schema.pbtxt`` into each dataset folder of ``out``."""
    text = schema_text(encoding)
    for name in datasets:
        (out / name / SCHEMA_FILE).write_text(text)
