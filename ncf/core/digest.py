"""SHA-256 digests of files and bytes: the one implementation every stage uses."""

from __future__ import annotations

import hashlib
import os


def sha256_bytes(data: bytes | memoryview) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 8 << 20) -> str:
    """Hex SHA-256 of the file at ``path``, read in ``chunk``-byte pieces (constant memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
