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

Parsing uses Arrow's multi-threaded CSV reader with an explicit schema (20M ML-20m rows in about
4 s on 2 cores). Arrow reports conversion errors without a row number, so on such an
error a slower diagnostic pass re-reads the file as text to find the first bad line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ncf.core.names import RAW_COLUMNS, RAW_ITEM, RAW_RATING, RAW_TIME, RAW_USER
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
    format: str  # "csv" or "dat"

    @property
    def rows(self) -> int:
        return int(self.user.size)


# Compressed inputs: the endings Arrow decompresses, and the magic bytes of what it would not.
COMPRESSED = {".gz": "gzip", ".bz2": "bz2"}
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\x28\xb5\x2f\xfd": "zstd", b"\xfd7zXZ": "xz"}
ZIP_MAGIC = b"PK\x03\x04"


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


def _open(path: Path) -> pa.NativeFile:
    """The file's bytes, decompressed when its ending says so."""
    return pa.input_stream(str(path), compression="detect")


def read_ratings(path: str | Path) -> Ratings:
    """Read and validate a ratings file; raise ValueError/FileNotFoundError on bad input.

    Parameters
    ----------
    path
        ``ratings.csv`` (with header) or ``ratings.dat`` (ML-1M, ``::``-separated).

    Returns
    -------
    Ratings
        The validated columns.
    """
    path = Path(path)
    _check_file(path)
    fmt = detect_format(path)
    if fmt == "csv":
        _check_header(path, _first_line(path))
    table = None if _header_only(path, fmt) else _read_table(path, fmt)
    if table is None or table.num_rows == 0:
        raise ValueError(
            f"{path} has a header but no ratings: expected lines like 1,31,2.5,1260759144 after "
            f"the header {CSV_HEADER}"
        )
    header_lines = 1 if fmt == "csv" else 0
    problem = first_violation(table, header_lines, _layout(fmt))
    if problem:
        raise ValueError(f"{path}, {problem}")
    user, item, time = (_column(table, name) for name in (RAW_USER, RAW_ITEM, RAW_TIME))
    del table
    # Arrow's allocator keeps freed parse buffers (about 0.5 GB for ML-20m): give them back.
    pa.default_memory_pool().release_unused()
    return Ratings(user=user, item=item, time=time, path=path, format=fmt)


def _layout(fmt: str) -> str:
    return (
        f"{DAT_LAYOUT} per line" if fmt == "dat" else f"{len(RAW_COLUMNS)} comma-separated fields"
    )


def _check_file(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no such ratings file; pass --input PATH to an ML-20m ratings.csv or ML-1M "
            f"ratings.dat (`ncf download` or `ncf synth` make one)"
        )
    if not path.is_file():
        raise ValueError(f"{path} is not a file; pass --input PATH to a ratings.csv or ratings.dat")
    _check_compression(path)
    with _open(path) as f:
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
    with _open(path) as f:
        data = f.read((1 << 16) + 1)
    if len(data) > 1 << 16:
        return False
    data = data.removeprefix(BOM)
    return b"\n" not in data.removesuffix(b"\n").removesuffix(b"\r")


def _first_line(path: Path) -> str:
    with _open(path) as f:
        raw = f.read(1 << 16).split(b"\n", 1)[0]
    raw = raw.removeprefix(BOM).rstrip(b"\r\n")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}, line 1: not UTF-8 text ({exc}); expected {CSV_HEADER}") from exc


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _check_header(path: Path, line: str) -> None:
    # Names as Arrow reads them: split on ',', surrounding quotes removed, spaces kept.
    names = [_unquote(n) for n in line.split(",")]
    missing = [c for c in RAW_COLUMNS if c not in names]
    repeated = sorted({n for n in names if n in RAW_COLUMNS and names.count(n) > 1})
    if not missing and not repeated:
        return
    hint = ""
    if any(sep in line for sep in (";", "\t", "|")):
        hint = " (the separator must be ',')"
    elif all(n.replace(".", "", 1).isdigit() for n in names if n):
        hint = " (the header line is missing)"
    what = f"missing column(s) {missing}" if missing else f"repeated column(s) {repeated}"
    raise ValueError(f"{path}, line 1 (header): {what}{hint}; found {names}, expected {CSV_HEADER}")


def _read_table(path: Path, fmt: str) -> pa.Table:
    """Arrow's fast typed read; on a parse or conversion error, diagnose the first bad line."""
    if fmt == "dat":
        read = pacsv.ReadOptions(column_names=list(DAT_FIELDS), block_size=BLOCK_SIZE)
        parse = pacsv.ParseOptions(delimiter=":", ignore_empty_lines=False)
        types = {**TYPES, **{n: pa.string() for n in DAT_FIELDS if n.startswith("_sep")}}
        columns = list(DAT_FIELDS)
    else:
        read = pacsv.ReadOptions(block_size=BLOCK_SIZE)
        parse = pacsv.ParseOptions(ignore_empty_lines=False)
        types, columns = TYPES, list(RAW_COLUMNS)
    # Only empty fields are null: "NA"/"null" in an id column must be an error, not a null.
    convert = pacsv.ConvertOptions(column_types=types, include_columns=columns, null_values=[""])
    try:
        return pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        message = diagnose(path, read, parse, columns, 1 if fmt == "csv" else 0, _layout(fmt))
        raise ValueError(
            f"{path}, {message}" if message else f"{path}: cannot parse: {exc}"
        ) from None


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    return (col.combine_chunks() if col.num_chunks > 1 else col.chunk(0)).to_numpy()
