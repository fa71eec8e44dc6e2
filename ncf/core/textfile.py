"""The readers of text files: malformed text is a ValueError naming the file, line and column.

Every JSON file a command reads (configs, ``metadata.json``, manifests, results) goes through
:func:`read_json` (or :func:`parse_json`, for bytes already read), and other UTF-8 text through
:func:`read_text`, so the CLI's error boundary prints ``PATH: line L column C: CAUSE; FIX``
without knowing which file was being read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FIX = "fix the file or write it again"


def _position(data: bytes, offset: int) -> tuple[int, int]:
    """(line, column), both from 1, of byte ``offset`` of ``data``."""
    before = data[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


def decode(data: bytes, path: str | os.PathLike) -> str:
    """``data``, the bytes of the file ``path``, as UTF-8 text.

    Raises
    ------
    ValueError
        ``data`` is not UTF-8; the message names ``path``, the line, the column and the byte.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _position(data, exc.start)
        cause = f"not UTF-8 text ({exc.reason}, byte {data[exc.start]:#04x})"
        raise ValueError(f"{path}: line {line} column {col}: {cause}; {FIX}") from None


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of the file ``path`` (an OSError as ``open`` raises it; ValueError as
    :func:`decode`)."""
    return decode(Path(path).read_bytes(), path)


def parse_json(data: bytes, path: str | os.PathLike) -> Any:
    """The JSON document in ``data``, the bytes of the file ``path``.

    Raises
    ------
    ValueError
        ``data`` is not UTF-8 or not JSON; the message names ``path``, the line and the column.
    """
    text = decode(data, path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        cause = f"not valid JSON ({exc.msg} at char {exc.pos})"
        raise ValueError(f"{path}: line {exc.lineno} column {exc.colno}: {cause}; {FIX}") from None


def read_json(path: str | os.PathLike) -> Any:
    """The JSON document in the file ``path`` (an OSError as ``open`` raises it; ValueError as
    :func:`parse_json`)."""
    return parse_json(Path(path).read_bytes(), path)
