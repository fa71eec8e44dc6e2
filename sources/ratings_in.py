"""The ratings table a source command reads (``ncf expand``): an ML-20m ``ratings.csv`` or parquet.

Accepted inputs:

- a CSV file whose header names ``userId,movieId,rating,timestamp`` (any order, other columns
  ignored), one rating per line: the ``ratings.csv`` of ML-20m, ml-latest-small, ``ncf synth``;
- a parquet file or folder with those four columns (``ncf synth --format parquet``, ``ncf expand``).

Values as the ETL's reader takes them (docs/ARCHITECTURE.md): ids non-negative integers below
2**31, ratings in [0.5, 5], timestamps non-negative integers. The first bad value is one ValueError
naming the file, line (CSV; the header is line 1) or row (parquet, from 0 in reading order), the
column and the value.

Why a reader here and not the ETL's (``ncf.workflows.io``): the data sources sit beside the ETL on
one floor, and floors' rooms never import each other (pyproject.toml's import-linter contracts).
This one reads only what a source command needs (no ML-1M ``.dat``, no compressed files) and
leaves the ETL's diagnostics (non-UTF-8 bytes, ``::`` separators) to the ETL.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ncf.core import names

TYPES = {
    names.RAW_USER: pa.int32(),
    names.RAW_ITEM: pa.int32(),
    names.RAW_RATING: pa.float32(),
    names.RAW_TIME: pa.int64(),
}
EXPECT = {
    names.RAW_USER: "a non-negative integer id below 2**31",
    names.RAW_ITEM: "a non-negative integer id below 2**31",
    names.RAW_RATING: "a rating between 0.5 and 5",
    names.RAW_TIME: "a non-negative integer Unix timestamp",
}
_TEXT_OK = {  # the text forms of valid values (the diagnostic pass of a CSV Arrow cannot convert)
    names.RAW_USER: r"^\s*[0-9]{1,10}\s*$",
    names.RAW_ITEM: r"^\s*[0-9]{1,10}\s*$",
    names.RAW_RATING: r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$",
    names.RAW_TIME: r"^\s*[0-9]{1,19}\s*$",
}
HEADER = ",".join(names.RAW_COLUMNS)


def read_ratings(path: str | Path, flag: str = "INPUT") -> dict[str, np.ndarray]:
    """The four raw columns of ``path`` (``TYPES``' dtypes), in file order.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        Not a ratings table, or a bad value: the message names the file, line or row, column,
        value and what was expected.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no such ratings file; pass {flag}: a ratings.csv (`ncf download`, "
            "`ncf synth`) or a parquet folder (`ncf synth --format parquet`)"
        )
    parquet = path.is_dir() or path.suffix.lower() == ".parquet"
    table = _read_parquet(path) if parquet else _read_csv(path)
    if table.num_rows == 0:
        raise ValueError(f"{path} holds no ratings; expected rows with columns {HEADER}")
    where = "row {row}" if parquet else "line {line}"
    _check_values(path, table, where)
    return {c: _numpy(table.column(c)) for c in names.RAW_COLUMNS}


def _numpy(col: pa.ChunkedArray) -> np.ndarray:
    return (col.combine_chunks() if col.num_chunks > 1 else col.chunk(0)).to_numpy()


def _read_parquet(path: Path) -> pa.Table:
    files = _parts(path) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: a folder without .parquet files; expected a ratings table")
    try:
        found = pq.read_schema(files[0]).names
        missing = [c for c in names.RAW_COLUMNS if c not in found]
        if missing:
            raise ValueError(f"{files[0]}: lacks the column(s) {missing}; expected {HEADER}")
        table = pq.read_table(path, columns=list(names.RAW_COLUMNS))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{path}: not a readable parquet ratings table ({exc})") from None
    try:
        return pa.table({c: table.column(c).cast(TYPES[c]) for c in names.RAW_COLUMNS})
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{path}: a column does not hold {dict(TYPES)} values ({exc})") from None


def _parts(folder: Path) -> list[Path]:
    """The folder's parquet files as a dataset reader lists them (hidden ``.``/``_`` skipped)."""
    return sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith((".", "_")))


def _read_csv(path: Path) -> pa.Table:
    with open(path, "rb") as f:
        first = f.read(1 << 16).split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf")
    found = [n.strip('"') for n in first.decode("utf-8", "replace").rstrip("\r").split(",")]
    missing = [c for c in names.RAW_COLUMNS if c not in found]
    if missing:
        raise ValueError(
            f"{path}, line 1 (header): missing column(s) {missing}; found {found[:8]}, "
            f"expected {HEADER}"
        )
    convert = pacsv.ConvertOptions(
        column_types=TYPES, include_columns=list(TYPES), null_values=[""]
    )
    parse = pacsv.ParseOptions(ignore_empty_lines=False)
    try:
        return pacsv.read_csv(path, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        raise ValueError(f"{path}, {_diagnose(path) or f'cannot parse: {exc}'}") from None


def _diagnose(path: Path) -> str | None:
    """The first line Arrow could not convert: re-read as text, one thread (its row numbers are
    the file's lines)."""
    skipped: list[pacsv.InvalidRow] = []

    def skip(row: pacsv.InvalidRow) -> str:
        skipped.append(row)
        return "skip"

    text = pacsv.ConvertOptions(
        column_types=dict.fromkeys(TYPES, pa.string()), include_columns=list(TYPES)
    )
    read = pacsv.ReadOptions(use_threads=False)
    parse = pacsv.ParseOptions(ignore_empty_lines=False, invalid_row_handler=skip)
    try:
        table = pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=text)
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return None
    rows = {
        c: np.flatnonzero(
            pc.invert(
                pc.match_substring_regex(pc.fill_null(table.column(c), ""), _TEXT_OK[c])
            ).to_numpy()
        )
        for c in TYPES
    }
    row, column = min(((int(r[0]), c) for c, r in rows.items() if r.size), default=(None, None))
    limit = skipped[0].number if skipped else None
    if row is not None and (limit is None or row + 2 < limit):
        value = table.column(column)[row].as_py()
        return f"line {row + 2}, column '{column}': value {value!r}; expected {EXPECT[column]}"
    if skipped:
        return (
            f"line {limit}: {skipped[0].actual_columns} field(s) in {skipped[0].text!r}, expected 4"
        )
    return None


def _check_values(path: Path, table: pa.Table, where: str) -> None:
    """Raise ValueError at the first empty or out-of-range value (in row order)."""
    first = None
    for column in names.RAW_COLUMNS:
        values = table.column(column)
        if column == names.RAW_RATING:
            ok = pc.and_(pc.greater_equal(values, 0.5), pc.less_equal(values, 5.0))
        else:
            ok = pc.greater_equal(values, 0)
        bad = np.flatnonzero(~pc.fill_null(ok, False).to_numpy())
        if bad.size and (first is None or bad[0] < first[0]):
            first = (int(bad[0]), column, int(bad.size))
    if first is None:
        return
    row, column, count = first
    at = where.format(row=row, line=row + 2)
    if all(table.column(c)[row].as_py() is None for c in names.RAW_COLUMNS):
        raise ValueError(f"{path}, {at} is empty; expected {len(names.RAW_COLUMNS)} values")
    value = table.column(column)[row].as_py()
    shown = "an empty value" if value is None else f"value {value!r}"
    raise ValueError(
        f"{path}, {at}, column '{column}': {shown} ({count} bad in this column); "
        f"expected {EXPECT[column]}"
    )
