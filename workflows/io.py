"""Read and validate MovieLens ratings: ML-20m ``ratings.csv`` or ML-1M ``ratings.dat``.

Formats (chosen by content and extension):

- CSV (ML-20m, ml-latest-small): a header line naming ``userId,movieId,rating,timestamp`` (any
  order, extra columns ignored, optional UTF-8 BOM, optional quotes), then one rating per line.
- ``::``-separated (ML-1M ``ratings.dat``): ``UserID::MovieID::Rating::Timestamp`` without a
  header. Chosen when the file name ends in ``.dat`` or its first line contains ``::``.

A file ending in ``.gz`` or ``.bz2`` is read decompressed (as Arrow does by extension); a
compressed file without that ending, or a zip archive, is refused with what to do.

Every line is one rating (LF or CRLF ends); an empty line is an error, so row numbers in error
messages are true 1-based line numbers of the file (the header is line 1). Values: ids are
decimal integers in ``[0, 2**31)``, ratings numbers in ``[0.5, 5]``, timestamps non-negative
integers (Unix seconds). Any violation raises one ValueError naming the file, the line, the column,
the value and what was expected (the first offending line; the count of bad lines in the column).

- parquet: a ``.parquet`` file or a folder of them (``ncf.workflows.parquet_input``).

Other column names: ``ncf etl --columns user=...,item=...,time=...`` (``ncf.workflows.columns``).

Parsing uses Arrow's multi-threaded CSV reader with an explicit schema (20M ML-20m rows in about
4 s on 2 cores). Arrow reports conversion errors without a row number, so on such an
error a slower diagnostic pass re-reads the file as text to find the first bad line. The
partitioned ETL reads the same formats in blocks (``ncf.workflows.blocks``) with these parsers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ncf.core.names import RAW_COLUMNS, RAW_ITEM, RAW_RATING, RAW_TIME, RAW_USER
from ncf.workflows.columns import ColumnMap
from ncf.workflows.validate import diagnose, first_violation

CSV_HEADER = ",".join(RAW_COLUMNS)
DAT_LAYOUT = "UserID::MovieID::Rating::Timestamp"
# ``a::b::c::d`` split on ':' gives 7 fields; the even ones are the four values.
DAT_FIELDS = (RAW_USER, "_sep1", RAW_ITEM, "_sep2", RAW_RATING, "_sep3", RAW_TIME)
TYPES = {RAW_USER: pa.int32(), RAW_ITEM: pa.int32(), RAW_RATING: pa.float32(), RAW_TIME: pa.int64()}
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark (Arrow skips it)
BLOCK_SIZE = 16 << 20  # bytes per parse block: big enough to amortize, small enough to parallelize


@dataclasses.dataclass
class Ratings:
    """Validated ratings as host arrays (rating values are validated, then dropped: every
    rating is a positive interaction)."""

    user: np.ndarray  # int32 [n], raw userId
    item: np.ndarray  # int32 [n], raw movieId
    time: np.ndarray  # int64 [n], Unix seconds
    path: Path
    format: str  # "csv", "dat" or "parquet"
    row: np.ndarray | None = None  # int64 [n], increasing in input order (parquet: row number)

    @property
    def rows(self) -> int:
        return int(self.user.size)

    def columns(self, with_row: bool) -> dict[str, np.ndarray]:
        """``user``, ``item``, ``time`` and, ``with_row``, ``row`` (the line order: what
        ``--ties file-order`` needs; the row number when the reader set none)."""
        cols = {"user": self.user, "item": self.item, "time": self.time}
        if with_row:
            cols["row"] = self.row if self.row is not None else np.arange(self.rows, dtype=np.int64)
        return cols


# Compressed inputs: the endings Arrow decompresses, and the magic bytes of what it would not.
COMPRESSED = {".gz": "gzip", ".bz2": "bz2"}
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\x28\xb5\x2f\xfd": "zstd", b"\xfd7zXZ": "xz"}
ZIP_MAGIC = b"PK\x03\x04"


def input_format(path: Path) -> str:
    """``"parquet"`` for a folder or a ``.parquet`` file, else :func:`detect_format`'s (after
    checking that the file exists, is not empty and is not compressed in a way Arrow misreads)."""
    if path.is_dir() or path.suffix == ".parquet":
        return "parquet"
    _check_file(path)
    return detect_format(path)


def is_compressed(path: Path) -> bool:
    """True when the file is read decompressed (its ending says gzip or bz2)."""
    return path.suffix in COMPRESSED


def detect_format(path: str | Path) -> str:
    """``"dat"`` for ML-1M style ``::`` files, ``"csv"`` otherwise (see the module docstring)."""
    path = Path(path)
    name = path.name.removesuffix(path.suffix) if path.suffix in COMPRESSED else path.name
    return "dat" if name.endswith(".dat") or "::" in _first_line(path) else "csv"


def _check_compression(path: Path) -> None:
    """Refuse compressed data that Arrow would read as text (a zip, or no known ending)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(ZIP_MAGIC):
        raise ValueError(
            f"{path} is a zip archive: unpack it first (unzip; `ncf download` unpacks "
            "the GroupLens archives) and pass the ratings.csv or ratings.dat inside"
        )
    kind = next((k for magic, k in MAGIC.items() if head.startswith(magic)), None)
    if kind is not None and COMPRESSED.get(path.suffix) != kind:
        ends = ", ".join(f"{e} ({k})" for e, k in COMPRESSED.items())
        raise ValueError(
            f"{path} is {kind}-compressed but not named for it: unpack it, or (for {ends}) "
            "give it that ending so it is read decompressed"
        )


def open_input(path: Path) -> pa.NativeFile:
    """The file's bytes, decompressed when its ending says so."""
    return pa.input_stream(str(path), compression="detect")


def read_ratings(path: str | Path, columns: ColumnMap | None = None) -> Ratings:
    """Read and validate a ratings file; raise ValueError/FileNotFoundError on bad input.

    Parameters
    ----------
    path
        ``ratings.csv`` (with header), ``ratings.dat`` (ML-1M, ``::``-separated), or parquet (a
        file or a folder of them).
    columns
        The input's column names (``--columns``); default MovieLens's.

    Returns
    -------
    Ratings
        The validated columns.
    """
    path, columns = Path(path), columns or ColumnMap()
    fmt = input_format(path)
    if fmt == "parquet":
        from ncf.workflows.blocks import plan_blocks, read_all

        cols = read_all(plan_blocks(path, columns))
        return Ratings(cols["user"], cols["item"], cols["time"], path, fmt, cols["row"])
    check_text_input(path, fmt, columns)
    table = _read_table(path, fmt, columns)
    if table.num_rows == 0:
        raise ValueError(_no_ratings(path, columns))
    header_lines = 1 if fmt == "csv" else 0
    problem = first_violation(table, header_lines, layout(fmt), columns.labels())
    if problem:
        raise ValueError(f"{path}, {problem}")
    user, item, time = (column_array(table, name) for name in (RAW_USER, RAW_ITEM, RAW_TIME))
    del table
    # Arrow's allocator keeps freed parse buffers (about 0.5 GB for ML-20m): give them back.
    pa.default_memory_pool().release_unused()
    return Ratings(user=user, item=item, time=time, path=path, format=fmt)


def check_text_input(path: Path, fmt: str, columns: ColumnMap) -> tuple[tuple[str, ...], int]:
    """Check a CSV or ``.dat`` file up to its first rating.

    Returns
    -------
    names, body
        The field names of each line (CSV: its header's; ``.dat``: the fixed layout's) and where
        the ratings start (bytes of the decompressed text: after the header line).
    """
    if fmt == "dat":
        if not columns.is_default:
            raise ValueError(f"{path}: ML-1M .dat files have fixed columns; drop --columns")
        return DAT_FIELDS, 0
    line = _first_line(path)
    _check_header(path, line, columns)
    if _header_only(path, fmt):
        raise ValueError(_no_ratings(path, columns))
    with open_input(path) as f:
        first = f.read(1 << 16)
    end = first.find(b"\n")
    return tuple(_unquote(n) for n in line.split(",")), len(first) if end < 0 else end + 1


def _no_ratings(path: Path, columns: ColumnMap) -> str:
    return (
        f"{path} has a header but no ratings: expected lines like 1,31,2.5,1260759144 after "
        f"the header {columns.header()}"
    )


def layout(fmt: str) -> str:
    return (
        f"{DAT_LAYOUT} per line" if fmt == "dat" else f"{len(RAW_COLUMNS)} comma-separated fields"
    )


def _check_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no such ratings file; pass --input PATH to an ML-20m ratings.csv, ML-1M "
            f"ratings.dat or parquet file or folder (`ncf download` or `ncf synth` make one)"
        )
    if not path.is_file():
        raise ValueError(
            f"{path} is not a file; pass --input PATH to a ratings.csv, ratings.dat or parquet"
        )
    _check_compression(path)
    with open_input(path) as f:
        start = f.read(len(BOM) + 1)  # decompressed
    if start in (b"", BOM):
        raise ValueError(
            f"{path} is empty: expected the header {CSV_HEADER} and one rating per line "
            f"(or ML-1M lines {DAT_LAYOUT})"
        )


def _header_only(path: Path, fmt: str) -> bool:
    """True for a CSV holding just its header line (Arrow then fails to infer the columns)."""
    if fmt != "csv":
        return False
    with open_input(path) as f:
        data = f.read((1 << 16) + 1)
    if len(data) > 1 << 16:
        return False
    data = data.removeprefix(BOM)
    return b"\n" not in data.removesuffix(b"\n").removesuffix(b"\r")


def _first_line(path: Path) -> str:
    with open_input(path) as f:
        raw = f.read(1 << 16).split(b"\n", 1)[0]
    raw = raw.removeprefix(BOM).rstrip(b"\r\n")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}, line 1: not UTF-8 text ({exc}); expected {CSV_HEADER}") from exc


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _check_header(path: Path, line: str, columns: ColumnMap) -> None:
    # Names as Arrow reads them: split on ',', surrounding quotes removed, spaces kept.
    names = [_unquote(n) for n in line.split(",")]
    wanted = columns.read()
    missing = [c for c in wanted if c not in names]
    repeated = sorted({n for n in names if n in wanted and names.count(n) > 1})
    if not missing and not repeated:
        return
    hint = ""
    if any(sep in line for sep in (";", "\t", "|")):
        hint = " (the separator must be ',')"
    elif all(n.replace(".", "", 1).isdigit() for n in names if n):
        hint = " (the header line is missing)"
    elif columns.is_default:
        hint = " (other names: --columns user=NAME,item=NAME,time=NAME)"
    what = f"missing column(s) {missing}" if missing else f"repeated column(s) {repeated}"
    raise ValueError(
        f"{path}, line 1 (header): {what}{hint}; found {names}, expected {columns.header()}"
    )


def _read_table(path: Path, fmt: str, columns: ColumnMap) -> pa.Table:
    """Arrow's fast typed read; on a parse or conversion error, diagnose the first bad line."""
    names = list(DAT_FIELDS) if fmt == "dat" else None  # a CSV names its columns in its header
    read = pacsv.ReadOptions(column_names=names, block_size=BLOCK_SIZE)
    try:
        return parse_csv(path, fmt, read, columns)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        raise diagnosed(path, fmt, columns, exc) from None


def parse_csv(source: Any, fmt: str, read: pacsv.ReadOptions, columns: ColumnMap) -> pa.Table:
    """Arrow's typed read of CSV or ``.dat`` text; the columns get their MovieLens names.

    Raises Arrow's error on text it cannot convert (:func:`diagnosed` names the line).
    """
    if fmt == "dat":
        parse = pacsv.ParseOptions(delimiter=":", ignore_empty_lines=False)
        types = {**TYPES, **{n: pa.string() for n in DAT_FIELDS if n.startswith("_sep")}}
        include = list(DAT_FIELDS)
    else:
        parse = pacsv.ParseOptions(ignore_empty_lines=False)
        labels = columns.labels()
        types = {labels[raw]: TYPES[raw] for raw in labels}
        include = columns.read()
    # Only empty fields are null: "NA"/"null" in an id column must be an error, not a null.
    convert = pacsv.ConvertOptions(column_types=types, include_columns=include, null_values=[""])
    table = pacsv.read_csv(source, read_options=read, parse_options=parse, convert_options=convert)
    if fmt == "dat":
        return table
    return table.rename_columns([raw for raw in RAW_COLUMNS if raw in columns.labels()])


def diagnosed(path: Path, fmt: str, columns: ColumnMap, exc: Exception) -> ValueError:
    """The error naming the first bad line of ``path``, after Arrow failed with ``exc``."""
    if fmt == "dat":
        names, roles = list(DAT_FIELDS), {n: n for n in DAT_FIELDS}
    else:
        names, roles = None, {name: raw for raw, name in columns.labels().items()}
    read = pacsv.ReadOptions(column_names=names, block_size=BLOCK_SIZE)
    parse = pacsv.ParseOptions(delimiter=":" if fmt == "dat" else ",", ignore_empty_lines=False)
    message = diagnose(path, read, parse, roles, 1 if fmt == "csv" else 0, layout(fmt))
    return ValueError(f"{path}, {message}" if message else f"{path}: cannot parse: {exc}")


def column_array(table: pa.Table, name: str, dtype: Any = None) -> np.ndarray:
    """One column as a numpy array (``dtype``: cast to it)."""
    col = table.column(name)
    values = (col.combine_chunks() if col.num_chunks > 1 else col.chunk(0)).to_numpy()
    return values if dtype is None else values.astype(dtype, copy=False)
