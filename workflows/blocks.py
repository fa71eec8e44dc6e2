"""The partitioned ETL's reader: the input as independent blocks, each read and validated alone.

A block is what one task reads without the rest of the input:

- ``ratings.csv`` / ``ratings.dat`` (uncompressed): a byte range of about ``block_bytes``, cut
  at line starts. Its rows carry ``row = block << 32 | row in block``, which increases in file
  order (``--ties file-order``), and its errors name the true line of the file (the lines before
  the block are counted only when there is an error to report).
- a compressed ``.gz`` / ``.bz2`` file: one block, read as a stream in chunks of ``block_bytes``.
- parquet (a file, or a folder of ``*.parquet`` files in natural order): row groups, gathered
  into blocks of up to ``block_rows`` rows. ``row`` is the global row number; errors name the
  file and its 1-based row.

Validation is :mod:`ncf.workflows.validate`'s, with the same messages as the in-memory reader
(``ncf.workflows.io.read_ratings``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ncf.core.names import RAW_ITEM, RAW_TIME, RAW_USER
from ncf.workflows import io
from ncf.workflows.columns import ColumnMap
from ncf.workflows.parquet_input import (
    check_parquet_values,
    parquet_files,
    parquet_metadata,
    read_parquet_rows,
)
from ncf.workflows.validate import first_violation

BLOCK_BYTES = 64 << 20  # CSV bytes per block: ~2.7M ML-20m ratings, about 0.3 GB parsed
BLOCK_ROWS = 4 << 20  # parquet rows per block
ROW_BITS = 32  # rows of one block: below 2**32


@dataclasses.dataclass(frozen=True)
class Block:
    """One independently readable piece of the input (see the module docstring)."""

    index: int
    path: str
    fmt: str  # "csv", "dat" or "parquet"
    start: int  # csv/dat: first byte; parquet: first row group
    stop: int  # csv/dat: one past the last byte (-1: a compressed stream); parquet: row groups
    row0: int  # parquet: global row number of the block's first row; csv/dat: 0
    names: tuple[str, ...]  # csv: the header's column names (dat: its fields)
    columns: ColumnMap


def plan_blocks(
    path: Path, columns: ColumnMap, block_bytes: int = BLOCK_BYTES, block_rows: int = BLOCK_ROWS
) -> list[Block]:
    """The blocks of ``path`` (validated header or schema; nothing else read yet)."""
    fmt = io.input_format(path)
    if fmt == "parquet":
        return _parquet_blocks(path, columns, block_rows)
    names, body = io.check_text_input(path, fmt, columns)
    if io.is_compressed(path):
        return [Block(0, str(path), fmt, body, -1, 0, names, columns)]
    size = path.stat().st_size
    cuts = [body]
    with open(path, "rb") as f:
        for k in range(1, math.ceil((size - body) / block_bytes)):
            f.seek(body + k * block_bytes)
            f.readline()  # to the start of the next line
            if f.tell() > cuts[-1] and f.tell() < size:
                cuts.append(f.tell())
    cuts.append(size)
    return [
        Block(k, str(path), fmt, a, b, 0, names, columns)
        for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True))
    ]


def _parquet_blocks(path: Path, columns: ColumnMap, block_rows: int) -> list[Block]:
    blocks, row0 = [], 0
    for file in parquet_files(path):
        meta = parquet_metadata(file, columns)
        first, rows = 0, 0
        for g in range(meta.num_row_groups):
            rows += meta.row_group(g).num_rows
            if rows >= block_rows or g == meta.num_row_groups - 1:
                blocks.append(
                    Block(len(blocks), str(file), "parquet", first, g + 1, row0, (), columns)
                )
                row0, first, rows = row0 + rows, g + 1, 0
    return blocks


def read_block(block: Block) -> dict[str, np.ndarray]:
    """The block's validated ``user``, ``item`` (int32), ``time`` and ``row`` (int64) arrays."""
    if block.fmt == "parquet":
        table = read_parquet_rows(Path(block.path), block.columns, block.start, block.stop)
        offset = _parquet_offset(block)
        return _columns(table, block.row0, f"{block.path}, row", offset, block.columns)
    if block.stop < 0:
        return _read_stream(block)
    with open(block.path, "rb") as f:
        f.seek(block.start)
        data = f.read(block.stop - block.start)
    table = _parse(block, data)
    problem = first_violation(table, 0, io.layout(block.fmt), block.columns.labels())
    if problem:
        before = _lines_before(Path(block.path), block.start)
        problem = first_violation(table, before, io.layout(block.fmt), block.columns.labels())
        raise ValueError(f"{block.path}, {problem}")
    return _columns(table, block.index << ROW_BITS, "", 0, block.columns)


def _read_stream(block: Block) -> dict[str, np.ndarray]:
    """A compressed file: chunks of the decompressed text, cut at line ends, validated in turn."""
    parts, lines, tail = [], 0, b""
    with io.open_input(Path(block.path)) as f:
        f.read(block.start)  # the header
        lines = 1 if block.fmt == "csv" else 0
        while True:
            chunk = f.read(BLOCK_BYTES)
            data = tail + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            data, tail = data[:cut], data[cut:]
            if data:
                table = _parse(block, data)
                problem = first_violation(
                    table, lines, io.layout(block.fmt), block.columns.labels()
                )
                if problem:
                    raise ValueError(f"{block.path}, {problem}")
                parts.append(_columns(table, len(parts) << ROW_BITS, "", 0, block.columns))
                lines += data.count(b"\n")
            if not chunk:
                break
    return {k: np.concatenate([p[k] for p in parts]) for k in ("user", "item", "time", "row")}


def _parse(block: Block, data: bytes) -> pa.Table:
    """Arrow's typed read of a block's lines; on an error, the whole file's first bad line."""
    read = pacsv.ReadOptions(column_names=list(block.names), block_size=io.BLOCK_SIZE)
    try:
        return io.parse_csv(pa.BufferReader(data), block.fmt, read, block.columns)
    except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
        raise io.diagnosed(Path(block.path), block.fmt, block.columns, exc) from None


def _lines_before(path: Path, offset: int) -> int:
    """Newlines in the file's first ``offset`` bytes (the lines before a block starting there)."""
    count = 0
    with open(path, "rb") as f:
        while offset > 0:
            chunk = f.read(min(offset, 16 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            offset -= len(chunk)
    return count


def _parquet_offset(block: Block) -> int:
    """Rows of the block's file before the block (for error messages: row within the file)."""
    meta = parquet_metadata(Path(block.path), block.columns)
    return sum(meta.row_group(g).num_rows for g in range(block.start))


def _columns(
    table: pa.Table, row0: int, where: str, offset: int, columns: ColumnMap
) -> dict[str, np.ndarray]:
    """Validated arrays of a parsed block (parquet checks its values here; text was checked)."""
    if where:
        check_parquet_values(table, where, offset, columns)
    cols = {
        "user": io.column_array(table, RAW_USER, np.int32),
        "item": io.column_array(table, RAW_ITEM, np.int32),
        "time": io.column_array(table, RAW_TIME, np.int64),
    }
    cols["row"] = np.arange(row0, row0 + table.num_rows, dtype=np.int64)
    return cols


def read_all(blocks: list[Block]) -> dict[str, Any]:
    """Every block's arrays, concatenated in order (the in-memory reader of parquet input)."""
    parts = [read_block(b) for b in blocks]
    return {k: np.concatenate([p[k] for p in parts]) for k in ("user", "item", "time", "row")}


def estimate_rows(blocks: list[Block]) -> int:
    """The input's ratings: exact for parquet (its footers), else the bytes over the mean line
    length of the first block's first 64 KiB (a compressed file counted at 4x its size)."""
    first = blocks[0]
    if first.fmt == "parquet":
        return sum(
            sum(parquet_metadata(Path(b.path), b.columns).row_group(g).num_rows
                for g in range(b.start, b.stop))
            for b in blocks
        )  # fmt: skip
    with io.open_input(Path(first.path)) as f:
        sample = f.read(first.start + (64 << 10))[first.start :]
    lines = max(sample.count(b"\n"), 1)
    size = Path(first.path).stat().st_size
    text = size * 4 if first.stop < 0 else size - first.start
    return max(1, round(text * lines / max(len(sample), 1)))
