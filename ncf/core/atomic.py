"""Atomic file and directory writes: a temp path beside the target, then one rename.

An interrupted writer leaves either the old target or the complete new one, never half of it
(plus, at worst, a hidden ``.tmp-*`` sibling that the next run removes). Each rename into place is
one ``atomic_commit`` for ``ncf.core.faults`` (the crash tests kill a writer just before the N-th).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ncf.core import faults, textfile

# renameat2(2) (docs/FACTS.md): AT_FDCWD, and the flag that swaps two paths in one atomic step.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    try:
        # mkstemp creates 0600 files; give the result the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        faults.hit(faults.ATOMIC_COMMIT)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_figure(path: str | os.PathLike, fig: Any, dpi: int = 100) -> None:
    """Render a matplotlib figure to PNG and write it atomically; the figure is closed."""
    import io

    import matplotlib.pyplot as plt  # only where a figure exists, so matplotlib is installed

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    write_bytes(path, buf.getvalue())


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


# The file inside an output directory that names the command that wrote it: ``--force`` replaces
# a directory only when it holds this marker with the same command's name.
OUTPUT_MARKER = ".ncf-output.json"
MARKER_FORMAT = "ncf-output/1"


def owner_of(path: str | os.PathLike) -> str | None:
    """The command (``"etl"``, ...) whose output directory ``path`` is, by its marker; else None."""
    marker = Path(path) / OUTPUT_MARKER
    try:
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and doc.get("format") == MARKER_FORMAT
    return doc.get("stage") if ok else None


def _describe(path: Path) -> str:
    """What stands at ``path``, for an error message."""
    if not path.is_dir():
        return "a file"
    names = sorted(p.name for p in path.iterdir())
    if not names:
        return "an empty folder"
    owner = owner_of(path)
    if owner is not None:
        return f"an output of `ncf {owner}`"
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    return f"a folder of {len(names)} entries not written by this project ({shown})"


def check_replaceable(
    target: str | os.PathLike,
    owner: str,
    inputs: tuple[str | os.PathLike, ...] = (),
    recognise: Callable[[Path], bool] | None = None,
) -> None:
    """Raise unless ``target`` is absent, an empty folder, or an output of ``ncf OWNER`` that
    holds no input (its marker says so, or ``recognise(target)``: an output written before the
    marker existed).

    Raises
    ------
    ValueError
        An input of the command lies inside ``target``.
    FileExistsError
        ``target`` exists and is not an output of ``ncf OWNER``; the message says what it is.
    """
    target = Path(target)
    if not target.exists():
        return
    for given in inputs:
        if Path(given).resolve().is_relative_to(target.resolve()):
            raise ValueError(
                f"the input {given} lies inside {target}, which this command would replace: "
                "choose an output outside the input's folder"
            )
    if target.is_dir() and not target.is_symlink():
        if owner_of(target) == owner or not any(target.iterdir()):
            return
        if recognise is not None and recognise(target):
            return
    what = _describe(target)
    raise FileExistsError(
        f"{target} is {what}: `ncf {owner}` replaces only its own output (with --force); "
        "choose another output path, or move that one away"
    )


def written_by(record: str | os.PathLike) -> str | None:
    """The stage named by the config file ``record`` (as ``write_config`` writes it beside a file
    output), or None when there is none or it is not such a file."""
    try:
        doc = json.loads(Path(record).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and str(doc.get("format", "")).startswith("ncf-config/")
    return doc.get("stage") if ok else None


def check_file_replaceable(
    path: str | os.PathLike,
    owner: str,
    force: bool,
    record: str | os.PathLike | None,
    inputs: tuple[str | os.PathLike, ...] = (),
    recognise: Callable[[Path], bool] | None = None,
    flag: str = "--out",
) -> None:
    """Raise unless the file output ``path`` (given by ``flag``) may be written by ``ncf OWNER``.

    An absent ``path`` may; an existing file only with ``force`` and only when ``record`` (the
    config file the command writes beside its output) names ``owner``, or, for a command that
    records its config inside the output, ``recognise(path)``; a folder or an input never.

    Raises
    ------
    ValueError
        ``path`` is one of the command's ``inputs``.
    FileExistsError
        ``path`` exists and may not be replaced; the message says what it is.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    for given in inputs:
        if Path(given).resolve() == path.resolve():
            raise ValueError(f"{flag} {path} is the command's input: choose another output file")
    if path.is_dir():
        raise FileExistsError(
            f"{path} is {_describe(path)}, not a file `ncf {owner}` wrote: choose another {flag}, or move that folder away"
        )
    mine = (
        written_by(record) == owner if record is not None else bool(recognise and recognise(path))
    )
    if mine:
        if force:
            return
        raise FileExistsError(f"{path} already exists; pass --force to replace it")
    how = f" (no {Path(record).name} of `ncf {owner}` beside it)" if record is not None else ""
    raise FileExistsError(
        f"{path} is a file not written by `ncf {owner}`{how}: `ncf {owner}` replaces only its own "
        f"output (with --force); choose another {flag}, or move that file away"
    )


def load_json(path: str | os.PathLike) -> Any | None:
    """The JSON document at ``path`` (as ``write_json`` wrote it), or None if there is no file."""
    path = Path(path)
    return textfile.read_json(path) if path.is_file() else None


@contextlib.contextmanager
def atomic_dir(
    target: str | os.PathLike,
    overwrite: bool = False,
    owner: str | None = None,
    inputs: tuple[str | os.PathLike, ...] = (),
    recognise: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Build a directory under a temporary name and rename it to ``target`` on success.

    Parameters
    ----------
    target
        Final directory. It must not exist unless ``overwrite`` is true.
    overwrite
        Replace an existing ``target`` (the old one is removed only after the new one is complete).
    owner
        The command writing it (``"etl"``): the new directory gets the marker naming it, and an
        existing ``target`` is replaced only if it holds the same marker (``check_replaceable``).
    inputs
        The command's input paths: none may lie inside a ``target`` to be replaced.
    recognise
        Also accept an existing ``target`` without the marker when ``recognise(target)`` is true
        (the command's outputs from before the marker existed).

    Yields
    ------
    Path
        The temporary directory to fill. On an exception it is deleted and ``target`` is untouched.
    """
    target = Path(target)
    if target.exists() and owner is not None:
        check_replaceable(target, owner, inputs, recognise)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; pass --force to replace it")
    made = _make_parents(target.parent)
    clean_stale(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        yield tmp
        if owner is not None:
            write_json(tmp / OUTPUT_MARKER, {"format": MARKER_FORMAT, "stage": owner})
        _fsync_dir(tmp)
        faults.hit(faults.ATOMIC_COMMIT)
        if target.exists():
            _swap_into_place(tmp, target)
        else:
            os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:  # deepest first; only the folders made here, and only if empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; return the folders it created, deepest first (a failed command
    removes them again: it leaves nothing behind, not even an empty folder)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where the OS or filesystem cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc older than glibc 2.28
        return False
    src, dst = os.fsencode(a), os.fsencode(b)
    if renameat2(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # filesystem or kernel without it
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _parked(target: Path) -> Path:
    """Where the two-rename fallback keeps the old ``target`` while the new one moves in."""
    return target.with_name(f".tmp-{target.name}-old-{os.getpid()}")


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Replace directory ``target`` by directory ``tmp`` and delete the old one.

    One atomic exchange where the OS has it, so ``target`` exists at every moment. Elsewhere two
    renames, the old ``target`` parked in between; ``clean_stale`` moves it back if the writer dies
    there.
    """
    if _exchange(tmp, target):
        _remove(tmp)  # tmp now holds the old target, a directory or a file
        return
    old = _parked(target)
    os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(old, target)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def clean_stale(target: str | os.PathLike) -> None:
    """Remove temporary siblings left by an earlier, killed writer of ``target``.

    A previous ``target`` parked by a writer killed between its two renames is moved back when
    ``target`` itself is missing (it is the last complete output).
    """
    target = Path(target)
    if not target.parent.is_dir():
        return
    parked = re.compile(re.escape(f".tmp-{target.name}-old-") + r"\d+")
    for stale in sorted(target.parent.glob(f".tmp-{target.name}-*")):
        if parked.fullmatch(stale.name) and stale.is_dir() and not target.exists():
            os.replace(stale, target)
        elif stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
