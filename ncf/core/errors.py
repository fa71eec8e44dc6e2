"""The error boundary of every command: a failure the user can cause or fix is one line on stderr.

The rule (docs/ARCHITECTURE.md, "Errors and exit codes"), applied by :func:`report` at each entry
(``ncf.cli.main``, ``ncf.bench.entry``, ``python -m ncf.models.train``):

- exit 2, bad input: a ValueError (a bad flag or config, a malformed JSON/CSV/parquet file), a
  missing input (FileNotFoundError), an output in the way (FileExistsError), a path of the wrong
  kind, a corrupt archive or pickle;
- exit 1, the environment: any other OSError (an unwritable output: EACCES/EPERM/EROFS, a full
  disk: ENOSPC/EDQUOT, ...);
- anything else is a bug and keeps its traceback.

The line is ``PROG: error: PATH: CAUSE; FIX``: an OSError names ``exc.filename``, ``exc.strerror``
and the flag that gave the path; a malformed JSON or UTF-8 text file is named with its line and
column by the readers of ``ncf.core.textfile`` (the ratings reader does the same for CSV). ``NCF_DEBUG=1`` re-raises instead (the traceback).
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import os
import pickle
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEBUG_ENV = "NCF_DEBUG"
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 1

# Bad input (exit 2). gzip.BadGzipFile is an OSError: it is matched here first.
BAD_INPUT: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    IsADirectoryError,
    EOFError,
    zipfile.BadZipFile,
    tarfile.TarError,
    pickle.UnpicklingError,
    gzip.BadGzipFile,
    zlib.error,
)


class ServerError(ConnectionError):
    """A running server (tritonserver) refused or failed what a command asked of it: exit 1, the
    environment. The message names the server and says what it serves now."""


# What a boundary turns into one line; any other exception keeps its traceback.
HANDLED: tuple[type[BaseException], ...] = (*BAD_INPUT, OSError)

_WRITE = {errno.EACCES, errno.EPERM, errno.EROFS}
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def exit_code(exc: BaseException) -> int:
    """1 for an environment fault (an OSError not in ``BAD_INPUT``), else 2 (bad input; also any
    other error a command chose to report as one line)."""
    environment = isinstance(exc, OSError) and not isinstance(exc, BAD_INPUT)
    return EXIT_ENVIRONMENT if environment else EXIT_BAD_INPUT


def report(prog: str, exc: BaseException, cfg: Any = None) -> int:
    """Print ``exc`` as the one line ``PROG: error: MESSAGE`` on stderr; its exit code.

    Parameters
    ----------
    prog : str
        The command as the user typed it (``ncf etl``).
    exc : BaseException
        The error; with ``NCF_DEBUG=1`` in the environment it is re-raised instead.
    cfg : Config, optional
        The command's resolved config: names the flag that gave a failing path.
    """
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        raise exc
    print(f"{prog}: error: {error_line(exc, cfg)}", file=sys.stderr)
    return exit_code(exc)


def error_line(exc: BaseException, cfg: Any = None) -> str:
    """The one-line message of ``exc`` (module docstring), without the ``PROG: error:`` prefix."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return oserror_line(exc, cfg)
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def oserror_line(exc: OSError, cfg: Any = None) -> str:
    """``PATH: STRERROR; FIX`` for an OSError that names a file (``exc.filename``).

    A hidden ``.tmp-NAME-XXXX`` of ``ncf.core.atomic`` is reported as the output ``NAME`` it was
    for; the fix names the flag of ``cfg`` whose path holds the failing one.
    """
    path = _output_of(Path(os.fsdecode(exc.filename)))
    where = str(path)
    if exc.filename2 is not None:
        where += f" -> {os.fsdecode(exc.filename2)}"
    flag = path_flag(cfg, path) if cfg is not None else None
    option = flag or "the path"
    if exc.errno in _WRITE:
        fix = f"choose a writable {flag or 'output location'} (or make its folder writable)"
    elif exc.errno in _FULL:
        fix = f"free space on that disk or choose {option} on another one"
    elif exc.errno == errno.ENOENT:
        fix = f"check {option}"
    elif exc.errno == errno.EEXIST:
        fix = f"remove it or choose another {flag or 'path'}"
    elif exc.errno in (errno.EISDIR, errno.ENOTDIR):
        fix = f"check that {option} names a {'file' if exc.errno == errno.EISDIR else 'folder'}"
    else:
        fix = f"check {option} and the machine"
    return f"{where}: {exc.strerror}; {fix}"


def _output_of(path: Path) -> Path:
    """The output a hidden ``.tmp-NAME-XXXX`` temp file of ``ncf.core.atomic`` stands for."""
    name = path.name
    if name.startswith(".tmp-") and "-" in name[5:]:
        return path.with_name(name[5:].rsplit("-", 1)[0].removesuffix("-old"))
    return path


def path_flag(cfg: Any, path: Path) -> str | None:
    """The flag (``--out``) of the path setting of ``cfg`` that is ``path`` or a folder above it
    (the deepest such setting; nested configs included), or None."""
    best: tuple[int, str] | None = None
    for name, value in _settings(cfg):
        if not isinstance(value, (str, Path)) or not str(value):
            continue
        given = Path(os.path.abspath(value))
        target = Path(os.path.abspath(path))
        if given == target or given in target.parents:
            depth = len(given.parts)
            if best is None or depth > best[0]:
                best = (depth, name)
    return best[1] if best else None


def _settings(cfg: Any) -> Iterator[tuple[str, Any]]:
    """(flag, value) of each setting of a config dataclass, nested configs flattened; a
    positional setting's flag is its metavar (``INPUT``)."""
    if not dataclasses.is_dataclass(cfg):
        return
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name, None)
        if dataclasses.is_dataclass(value):
            yield from _settings(value)
        elif f.metadata.get("positional"):
            yield f.metadata.get("custom_args", {}).get("metavar") or f.name.upper(), value
        else:
            yield "--" + f.name.replace("_", "-"), value
