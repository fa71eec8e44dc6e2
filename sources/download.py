"""``ncf download``: fetch an official MovieLens archive, verify it, and extract it atomically.

The archive is streamed (urllib, any scheme it supports, ``file://`` included) into a temporary
file beside its final name while its size and MD5 are computed; a mismatch deletes the temporary
file and names the expected and actual values. The verified zip is kept (``OUT/<name>.zip``) so a
second run does not download again, and is extracted into ``OUT/<name>/`` through a temporary
directory, so an interrupted run never leaves a half-extracted dataset behind. The resolved config
of the command is recorded as ``OUT/<name>.config.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import IO

from ncf.core.atomic import atomic_dir, clean_stale
from ncf.core.config import Config, flag, setting, write_config

_BASE = "https://files.grouplens.org/datasets/movielens/"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Archive:
    """An archive to fetch: where from, what it must look like, and the ratings file inside.

    ``size``/``md5`` of None mean "not pinned" (the archive is then checked by the zip's own CRCs
    and by the presence of ``ratings``).
    """

    name: str  # also the folder inside the zip and the extraction folder
    url: str
    ratings: str  # ratings file inside the folder
    size: int | None = None
    md5: str | None = None


ARCHIVES: dict[str, Archive] = {
    # Size and MD5 as GroupLens publishes them (docs/FACTS.md).
    "ml-20m": Archive(
        "ml-20m",
        _BASE + "ml-20m.zip",
        "ratings.csv",
        198_702_078,
        "cd245b17a1ae2cc31bb14903e1204af3",
    ),
    # MD5 as pinned by several independent dataset loaders; the byte size is not pinned here.
    "ml-1m": Archive(
        "ml-1m", _BASE + "ml-1m.zip", "ratings.dat", None, "c4d9eecfca2ab87c1945afe126590906"
    ),
    # "latest" archives are re-released by GroupLens: no fixed checksum exists.
    "ml-latest-small": Archive("ml-latest-small", _BASE + "ml-latest-small.zip", "ratings.csv"),
}


def _progress(done: int, total: int | None, t0: float, out: IO[str]) -> None:
    rate = done / max(time.perf_counter() - t0, 1e-9) / 2**20
    of = f" / {total / 2**20:.1f} MiB ({100 * done / total:.0f}%)" if total else " MiB"
    out.write(f"\r  {done / 2**20:.1f}{of}  {rate:.1f} MiB/s")
    out.flush()


def check(size: int, md5: str, spec: Archive, source: str) -> None:
    """Raise ValueError if ``size``/``md5`` differ from the pinned values of ``spec``."""
    if spec.size is not None and size != spec.size:
        raise ValueError(
            f"{source}: size mismatch for {spec.name}: expected {spec.size:,} bytes, got {size:,} "
            "(truncated or different file; delete it and download again)"
        )
    if spec.md5 is not None and md5 != spec.md5:
        raise ValueError(
            f"{source}: md5 mismatch for {spec.name}: expected {spec.md5}, got {md5} "
            "(corrupted or different release; delete it and download again)"
        )


def fetch(url: str, dest: str | os.PathLike, spec: Archive, progress: bool = True) -> Path:
    """Stream ``url`` to ``dest`` atomically, verifying size and MD5 on the way.

    Parameters
    ----------
    url
        Any URL urllib opens (``https://``, ``file://``).
    dest
        Final path of the archive; written only once the bytes are verified.
    spec
        Expected size/MD5 (None entries are not checked).
    progress
        Print a progress line on stderr.

    Returns
    -------
    Path
        ``dest``. On any error nothing is left at ``dest`` or beside it.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{dest.name}-", dir=dest.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the archive is an ordinary file
    try:
        digest, size, t0 = hashlib.md5(), 0, time.perf_counter()
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=60) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or spec.size
            while block := resp.read(_CHUNK):
                f.write(block)
                digest.update(block)
                size += len(block)
                if progress:
                    _progress(size, total, t0, sys.stderr)
            f.flush()
            os.fsync(f.fileno())
        if progress:
            sys.stderr.write("\n")
        check(size, digest.hexdigest(), spec, url)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return dest


def verify_file(path: str | os.PathLike, spec: Archive) -> None:
    """Check a local archive's size and MD5 against ``spec`` (ValueError on mismatch)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: archive not found (check --archive)")
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    check(path.stat().st_size, digest.hexdigest(), spec, str(path))


def _members(zf: zipfile.ZipFile, spec: Archive, source: str) -> list[tuple[zipfile.ZipInfo, str]]:
    """(member, path inside the dataset folder) for each file under ``<name>/``, traversal-safe."""
    out = []
    for info in zf.infolist():
        parts = PurePosixPath(info.filename).parts
        if info.is_dir() or not parts or parts[0] != spec.name:
            continue
        if info.filename.startswith("/") or ".." in parts:
            raise ValueError(f"{source}: unsafe member path {info.filename!r} in the zip; refusing")
        out.append((info, "/".join(parts[1:])))
    if not any(rel == spec.ratings for _, rel in out):
        raise ValueError(
            f"{source}: {spec.name}/{spec.ratings} is missing from the zip "
            "(not a MovieLens archive, or the wrong dataset name)"
        )
    return out


def extract(
    archive: str | os.PathLike, spec: Archive, out_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Test the zip's CRCs and extract ``<name>/`` into ``out_dir/<name>`` atomically.

    An existing ``out_dir/<name>`` is replaced only if ``ncf download`` extracted it (its marker,
    or, from before markers, nothing in it but the zip's members) or it is empty.

    Returns
    -------
    Path
        The ratings file (``out_dir/<name>/<ratings>``).
    """
    archive, target = Path(archive), Path(out_dir) / spec.name
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise ValueError(
            f"{archive}: not a valid zip file ({exc}); delete it and download again"
        ) from exc
    with zf:
        members = _members(zf, spec, str(archive))
        try:
            bad = zf.testzip()  # reads every member: CRC mismatch -> name, broken deflate -> error
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ValueError(
                f"{archive}: damaged zip ({exc}); delete it and download again"
            ) from exc
        if bad is not None:
            raise ValueError(
                f"{archive}: member {bad!r} fails its CRC check; delete it and download again"
            )
        names = {rel for _, rel in members}

        def extracted_before(folder: Path) -> bool:  # written before the marker: zip members only
            files = [p for p in folder.rglob("*") if not p.is_dir()]
            return bool(files) and all(p.relative_to(folder).as_posix() in names for p in files)

        replace = dict(owner="download", inputs=(archive,), recognise=extracted_before)
        with atomic_dir(target, overwrite=overwrite, **replace) as tmp:
            for info, rel in members:
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
    return target / spec.ratings


def download(
    spec: Archive,
    out_dir: str | os.PathLike,
    archive: str | os.PathLike | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Fetch (or take ``archive``), verify, and extract ``spec`` under ``out_dir``; the ratings path."""
    out_dir = Path(out_dir)
    ratings = out_dir / spec.name / spec.ratings
    if ratings.is_file() and not force:
        return ratings
    if archive is not None:
        verify_file(archive, spec)
        zip_path = Path(archive)
    else:
        zip_path = out_dir / f"{spec.name}.zip"
        if zip_path.is_file():
            verify_file(zip_path, spec)  # a kept, earlier download: verify instead of refetching
        else:
            print(f"ncf download: fetching {spec.url}", file=sys.stderr)
            fetch(spec.url, zip_path, spec, progress)
    return extract(zip_path, spec, out_dir, overwrite=True)


@dataclass
class DownloadConfig(Config):
    """Fetch and verify an official MovieLens archive (`ncf download`)."""

    dataset: str | None = setting(
        None,
        help="which MovieLens archive (required)",
        positional=True,
        nargs="?",
        choices=sorted(ARCHIVES),
        metavar="DATASET",
    )
    out: Path = setting(Path("data"), help="folder for the zip and the extracted dataset")
    url: str | None = setting(
        None, help="download from this URL instead (mirror, file://; unset: GroupLens)"
    )
    archive: Path | None = setting(
        None, help="use this local zip instead of downloading (verified the same way)"
    )
    force: bool = flag(
        False, help="extract again even if already present (only over a folder it extracted)"
    )
    quiet: bool = flag(False, help="no progress line")

    def check(self) -> None:
        """Raise ValueError when no dataset is named."""
        if self.dataset is None:
            raise ValueError(
                f"DATASET: required, one of {sorted(ARCHIVES)} (`ncf download ml-20m`)"
            )


CONFIG = DownloadConfig


def config_path(out: Path, dataset: str) -> Path:
    """Where ``ncf download`` records its resolved config: ``OUT/<dataset>.config.json``, beside
    the kept zip (the extracted folder holds only the archive's files)."""
    return Path(out) / f"{dataset}.config.json"


def run(cfg: DownloadConfig) -> int:
    """Fetch, verify and extract; print the ratings path; record the config beside the dataset."""
    spec = ARCHIVES[cfg.dataset]
    if cfg.url:
        spec = replace(spec, url=cfg.url)
    ratings = download(spec, cfg.out, cfg.archive, cfg.force, progress=not cfg.quiet)
    write_config(config_path(cfg.out, cfg.dataset), cfg, "download")
    unpinned = [k for k in ("size", "md5") if getattr(spec, k) is None]
    if unpinned:
        print(
            f"ncf download: {spec.name}: {' and '.join(unpinned)} not pinned; verified by zip CRCs "
            f"and the presence of {spec.ratings}",
            file=sys.stderr,
        )
    print(f"ncf download: ratings at {ratings}", file=sys.stderr)
    print(ratings)
    return 0
