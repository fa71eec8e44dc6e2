"""Vectorized validation of parsed ratings, and the diagnostic pass that finds the first bad line.

Both report the first offending line as ``line L, column 'c': value 'v' ...; expected ...``
(L is the 1-based line number in the file; the header, if any, is line 1).
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ncf.core.names import RAW_ITEM, RAW_RATING, RAW_TIME, RAW_USER

RATING_MIN, RATING_MAX = 0.5, 5.0
ID_EXPECT = "a non-negative integer id below 2**31"
EXPECT = {
    RAW_USER: ID_EXPECT,
    RAW_ITEM: ID_EXPECT,
    RAW_RATING: f"a rating between {RATING_MIN} and {RATING_MAX:g}",
    RAW_TIME: "a non-negative integer Unix timestamp",
}
# Text forms accepted by the diagnostic pass (after trimming whitespace); the numeric range is
# checked after conversion. Integers have at most 10 (ids) / 19 (timestamps) digits.
_INT_RE = {RAW_USER: r"^[0-9]{1,10}$", RAW_ITEM: r"^[0-9]{1,10}$", RAW_TIME: r"^[0-9]{1,19}$"}
_INT_MAX = {RAW_USER: "2147483647", RAW_ITEM: "2147483647", RAW_TIME: "9223372036854775807"}
_FLOAT_RE = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"


# Masks come from ChunkedArray.to_numpy(): it copies and turns nulls into NaN/None (pyarrow 11, in
# the NGC images, has no zero_copy_only argument there; later versions copy by default).


def _bad_typed(col: pa.ChunkedArray, name: str) -> np.ndarray | None:
    """Bool mask of invalid rows of a typed column, or None when all are valid (the fast check)."""
    if name.startswith("_sep"):  # the empty fields between '::' separators
        ok = pc.equal(col, "")
        return None if pc.all(ok).as_py() else ~ok.to_numpy()
    if name == RAW_RATING:
        r = col.to_numpy()  # nulls become NaN, which fail the range test
        bad = ~((r >= RATING_MIN) & (r <= RATING_MAX))
        return bad if bad.any() else None
    if col.null_count == 0 and pc.min(col).as_py() >= 0:
        return None
    values = col.to_numpy()  # float with NaN for nulls
    return ~(values >= 0)


def first_violation(
    table: pa.Table, header_lines: int, layout: str, labels: dict[str, str] | None = None
) -> str | None:
    """Describe the first invalid row of a typed ratings table, or return None if all are valid.

    The table's columns have the MovieLens names (``RAW_USER`` ...); ``labels`` maps them to the
    input's own names for the message (``ncf etl --columns``).
    """
    found: list[tuple[int, int, str]] = []  # (row, column order, name)
    masks = {}
    for order, name in enumerate(table.column_names):
        bad = _bad_typed(table.column(name), name)
        if bad is not None:
            masks[name] = bad
            found.append((int(np.argmax(bad)), order, name))
    if not found:
        return None
    row, _, name = min(found)
    line = row + 1 + header_lines
    if all(table.column(c)[row].as_py() in (None, "") for c in table.column_names):
        return f"line {line} is empty; expected {layout}"
    value = table.column(name)[row].as_py()
    count = int(masks[name].sum())
    if name.startswith("_sep"):
        return f"line {line}: malformed '::' separator (found ':{value}:'); expected {layout}"
    shown = "an empty value" if value is None else f"value {value!r}"
    label = (labels or {}).get(name, name)
    return f"line {line}, column '{label}': {shown} ({count} bad line(s) in this column); expected {EXPECT[name]}"


def _bad_text(col: pa.ChunkedArray, name: str) -> np.ndarray:
    """Bool mask of invalid rows of a text column (used by the diagnostic pass)."""
    text = pc.utf8_trim_whitespace(pc.fill_null(col, ""))
    if name.startswith("_sep"):
        return ~pc.equal(col, "").to_numpy()
    if name == RAW_RATING:
        ok = pc.match_substring_regex(text, _FLOAT_RE)
        values = pc.cast(pc.if_else(ok, text, "0"), pa.float64()).to_numpy()
        return ~(ok.to_numpy() & (values >= RATING_MIN) & (values <= RATING_MAX))
    limit = _INT_MAX[name]
    ok = pc.and_(
        pc.match_substring_regex(text, _INT_RE[name]),
        pc.or_(pc.less(pc.utf8_length(text), len(limit)), pc.less_equal(text, limit)),
    )
    return ~ok.to_numpy()


def _first_non_utf8_line(path: Path, block: int = 16 << 20) -> tuple[int, bytes] | None:
    """(1-based line number, bytes) of the file's first line that is not UTF-8, or None."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before, tail = 0, b""  # tail: the bytes of the current (unfinished) line so far
    with pa.input_stream(str(path), compression="detect") as f:
        while chunk := f.read(block):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                head, bad = chunk[: exc.start], chunk[exc.start :]
                line = (tail + head).rsplit(b"\n", 1)[-1] + bad.split(b"\n", 1)[0]
                return lines_before + head.count(b"\n") + 1, line.rstrip(b"\r")
            lines_before += chunk.count(b"\n")
            tail = (tail + chunk).rsplit(b"\n", 1)[-1][-4096:]
    return None


def diagnose(
    path: Path,
    read: pacsv.ReadOptions,
    parse: pacsv.ParseOptions,
    columns: dict[str, str],
    header_lines: int,
    layout: str,
) -> str | None:
    """Re-read ``path`` as text in one thread and describe its first bad line (None if none found).

    ``columns`` maps each input column to read to its MovieLens name (which sets its check).

    Arrow's typed reader reports neither the line of a conversion error nor, when multi-threaded,
    of a line with the wrong number of fields; this pass finds both. Its text kernels need UTF-8,
    so the lines before the first line that is not UTF-8 are diagnosed, then that line.
    """
    spec = _Text(read, parse, columns, header_lines, layout)
    not_utf8 = _first_non_utf8_line(path)
    if not_utf8 is None:
        return _diagnose_text(path, spec)
    number, line = not_utf8
    earlier = _diagnose_text(pa.BufferReader(_first_lines(path, number - 1)), spec)
    return earlier or f"line {number}: bytes that are not UTF-8 ({line[:80]!r}); expected {layout}"


class _Text(NamedTuple):
    """How the diagnostic pass reads the text (``diagnose``'s parameters)."""

    read: pacsv.ReadOptions
    parse: pacsv.ParseOptions
    columns: dict[str, str]  # input name -> MovieLens name
    header_lines: int
    layout: str


def _first_lines(path: Path, n: int, block: int = 16 << 20) -> bytes:
    """The first ``n`` lines of the (decompressed) file, newlines included."""
    out, seen = [], 0
    with pa.input_stream(str(path), compression="detect") as f:
        while seen < n and (chunk := f.read(block)):
            count = chunk.count(b"\n")
            if seen + count >= n:  # the n-th newline is in this chunk
                ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == ord("\n"))
                out.append(chunk[: int(ends[n - seen - 1]) + 1])
                break
            out.append(chunk)
            seen += count
    return b"".join(out)


def _diagnose_text(source: Path | pa.BufferReader, spec: _Text) -> str | None:
    """``diagnose`` of UTF-8 text (a path or a buffer)."""
    first_bad_row: list[pa.csv.InvalidRow] = []

    def on_invalid(row: pa.csv.InvalidRow) -> str:
        if not first_bad_row:
            first_bad_row.append(row)
        return "skip"

    read = pacsv.ReadOptions(
        column_names=spec.read.column_names, block_size=spec.read.block_size, use_threads=False
    )
    parse = pacsv.ParseOptions(
        delimiter=spec.parse.delimiter, ignore_empty_lines=False, invalid_row_handler=on_invalid
    )
    columns, header_lines, layout = spec.columns, spec.header_lines, spec.layout
    convert = pacsv.ConvertOptions(
        column_types={c: pa.string() for c in columns},
        include_columns=list(columns),
        check_utf8=False,
    )
    try:
        table = pacsv.read_csv(
            source, read_options=read, parse_options=parse, convert_options=convert
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return None
    # Rows before the first skipped line map exactly to lines; later rows are shifted, but a
    # structural error then comes first anyway.
    limit = first_bad_row[0].number if first_bad_row else None
    best = None
    for order, name in enumerate(columns):
        bad = _bad_text(table.column(name), columns[name])
        if bad.any():
            row = int(np.argmax(bad))
            if best is None or (row, order) < best[:2]:
                best = (row, order, name)
    if best is not None and (limit is None or best[0] + 1 + header_lines < limit):
        return _text_message(table, best[0], best[2], header_lines, (layout, columns))
    if first_bad_row:
        bad_row = first_bad_row[0]
        return (
            f"line {bad_row.number}: found {bad_row.actual_columns} field(s) in "
            f"{bad_row.text!r}, expected {layout}"
        )
    return None


def _text(scalar: pa.Scalar) -> str:
    """A text cell as str; undecodable bytes are shown as U+FFFD instead of failing."""
    if not scalar.is_valid:
        return ""
    return scalar.as_buffer().to_pybytes().decode("utf-8", errors="replace")


def _text_message(table: pa.Table, row: int, name: str, header_lines: int, expect: tuple) -> str:
    """The message for ``row``'s bad ``name``; ``expect`` is ``(layout, input -> MovieLens name)``."""
    layout, roles = expect
    line = row + 1 + header_lines
    values = {c: _text(table.column(c)[row]) for c in table.column_names}
    if all(v == "" for v in values.values()):
        return f"line {line} is empty; expected {layout}"
    if name.startswith("_sep"):
        return (
            f"line {line}: malformed '::' separator (found ':{values[name]}:'); expected {layout}"
        )
    return f"line {line}, column '{name}': value {values[name]!r}; expected {EXPECT[roles[name]]}"
