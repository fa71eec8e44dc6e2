"""Parquet input: a ``.parquet`` file or a folder of them, as Merlin users keep their ratings.

Columns (``ncf.workflows.columns``; MovieLens's names unless ``--columns``): the user and item ids
must be integer columns (values in ``[0, 2**31)``), the time an integer (Unix seconds) or a
timestamp column (converted to seconds); none may be null. A ``rating`` column under MovieLens's
names is checked as in a CSV (0.5 to 5); it may be absent. Every error names the file, the 1-based
row within it, the column and the value.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ncf.core.names import RAW_COLUMNS, RAW_RATING, RAW_TIME
from ncf.workflows.columns import ColumnMap
from ncf.workflows.validate import EXPECT, RATING_MAX, RATING_MIN

ID_LIMIT = 2**31


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def parquet_files(path: Path) -> list[Path]:
    """The parquet files of ``path`` (itself, or a folder's ``*.parquet`` in natural order)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; pass --input PATH")
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.parquet"), key=_natural_key)
    if not files:
        raise ValueError(
            f"{path}: a folder without *.parquet files; pass a ratings.csv, ratings.dat, a "
            "parquet file or a folder of them"
        )
    return files


def _columns_of(columns: ColumnMap, schema: pa.Schema) -> dict[str, str]:
    """MovieLens name -> this file's column to read (a default ``rating`` only when present)."""
    labels = columns.labels()
    if columns.is_default and RAW_RATING not in schema.names:
        labels.pop(RAW_RATING)
    return labels


def parquet_metadata(file: Path, columns: ColumnMap) -> pq.FileMetaData:
    """The file's footer, after checking its schema holds the columns with usable types."""
    try:
        pf = pq.ParquetFile(file)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{file}: not a readable parquet file ({exc})") from None
    schema = pf.schema_arrow
    for raw, name in _columns_of(columns, schema).items():
        if name not in schema.names:
            hint = "" if not columns.is_default else " (other names: --columns user=,item=,time=)"
            raise ValueError(f"{file}: no column {name!r}{hint}; the file has {schema.names}")
        kind = schema.field(name).type
        ok = (
            pa.types.is_integer(kind)
            or (raw == RAW_TIME and pa.types.is_timestamp(kind))
            or (raw == RAW_RATING and (pa.types.is_floating(kind) or pa.types.is_integer(kind)))
        )
        if not ok:
            raise ValueError(f"{file}: column {name!r} has type {kind}; expected {EXPECT[raw]}")
    return pf.metadata


def read_parquet_rows(file: Path, columns: ColumnMap, first: int, stop: int) -> pa.Table:
    """Row groups ``[first, stop)`` of ``file`` with MovieLens column names (times in seconds)."""
    pf = pq.ParquetFile(file)
    labels = _columns_of(columns, pf.schema_arrow)
    table = pf.read_row_groups(list(range(first, stop)), columns=list(labels.values()))
    table = table.rename_columns(list(labels))
    time = table.column(RAW_TIME)
    if pa.types.is_timestamp(time.type):
        seconds = pc.divide(pc.cast(time, pa.int64()), _per_second(time.type.unit))
        table = table.set_column(table.column_names.index(RAW_TIME), RAW_TIME, seconds)
    return table.select([raw for raw in RAW_COLUMNS if raw in labels])


def _per_second(unit: str) -> int:
    return {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]


def check_parquet_values(table: pa.Table, where: str, offset: int, columns: ColumnMap) -> None:
    """Raise ValueError naming the first bad value (``where`` = "FILE, row"; rows 1-based)."""
    found = []
    for order, raw in enumerate(table.column_names):
        values = table.column(raw).to_numpy()  # a copy; nulls -> NaN / None
        with np.errstate(invalid="ignore"):
            if raw == RAW_RATING:
                bad = ~((values >= RATING_MIN) & (values <= RATING_MAX))
            elif raw == RAW_TIME:
                bad = ~(values >= 0)
            else:
                bad = ~((values >= 0) & (values < ID_LIMIT))
        if bad.any():
            found.append((int(np.argmax(bad)), order, raw))
    if found:
        row, _, raw = min(found)
        value = table.column(raw)[row].as_py()
        shown = "an empty value" if value is None else f"value {value!r}"
        name = columns.labels().get(raw, raw)
        raise ValueError(
            f"{where} {offset + row + 1}, column '{name}': {shown}; expected {EXPECT[raw]}"
        )
