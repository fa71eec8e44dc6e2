"""``ncf download`` on local archives only: the real fetch code through ``file://`` URLs, no network."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from ncf import cli
from ncf.sources.download import ARCHIVES, Archive, download, extract, fetch, verify_file

RATINGS = "userId,movieId,rating,timestamp\n1,10,4.0,964982703\n2,20,3.5,964981247\n"


def _zip(path: Path, files: dict[str, str], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def _spec(path: Path, name: str = "toy") -> Archive:
    data = path.read_bytes()
    return Archive(name, path.as_uri(), "ratings.csv", len(data), hashlib.md5(data).hexdigest())


@pytest.fixture()
def toy_zip(tmp_path: Path) -> Path:
    return _zip(tmp_path / "src.zip", {"toy/ratings.csv": RATINGS, "toy/README.txt": "toy\n"})


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_official_specs_are_pinned_as_published() -> None:
    ml20 = ARCHIVES["ml-20m"]
    assert (ml20.size, ml20.md5) == (198_702_078, "cd245b17a1ae2cc31bb14903e1204af3")
    assert ml20.url == "https://files.grouplens.org/datasets/movielens/ml-20m.zip"
    assert ARCHIVES["ml-1m"].ratings == "ratings.dat"


def test_fetch_file_url_verifies_and_writes(toy_zip: Path, tmp_path: Path) -> None:
    spec = _spec(toy_zip)
    out = fetch(spec.url, tmp_path / "dl" / "toy.zip", spec, progress=False)
    assert out.read_bytes() == toy_zip.read_bytes()
    assert _leftovers(tmp_path / "dl") == ["toy.zip"]


@pytest.mark.parametrize(
    ("field", "bad", "expected_text"),
    [("md5", "0" * 32, "md5 mismatch"), ("size", 7, "size mismatch")],
)
def test_fetch_mismatch_names_both_values_and_leaves_nothing(
    toy_zip: Path, tmp_path: Path, field: str, bad: object, expected_text: str
) -> None:
    good = _spec(toy_zip)
    spec = replace(good, **{field: bad})
    dest = tmp_path / "dl" / "toy.zip"
    with pytest.raises(ValueError, match=expected_text) as err:
        fetch(spec.url, dest, spec, progress=False)
    msg = str(err.value)
    actual = good.md5 if field == "md5" else f"{good.size:,}"
    assert str(bad) in msg and actual in msg
    assert _leftovers(dest.parent) == []  # no partial archive, no temp file


def test_download_extracts_atomically_and_is_idempotent(toy_zip: Path, tmp_path: Path) -> None:
    spec = _spec(toy_zip)
    out = tmp_path / "data"
    ratings = download(spec, out, progress=False)
    assert ratings == out / "toy" / "ratings.csv"
    assert ratings.read_text() == RATINGS
    assert _leftovers(out) == ["toy", "toy.zip"]
    assert _leftovers(out / "toy") == [".ncf-output.json", "README.txt", "ratings.csv"]
    ratings.write_text("kept")  # present already: a second run neither refetches nor re-extracts
    assert download(spec, out, progress=False).read_text() == "kept"
    assert download(spec, out, force=True, progress=False).read_text() == RATINGS


def test_force_extracts_only_over_what_download_extracted(toy_zip: Path, tmp_path: Path) -> None:
    spec, out = _spec(toy_zip), tmp_path / "data"
    (out / "toy").mkdir(parents=True)
    (out / "toy" / "mine.txt").write_text("keep")  # a user's folder where the dataset would go
    with pytest.raises(FileExistsError, match=r"not written by this project \(mine.txt\)"):
        download(spec, out, force=True, progress=False)
    assert _leftovers(out / "toy") == ["mine.txt"]
    (out / "toy" / "mine.txt").unlink()
    (out / "toy" / "ratings.csv").write_text("old")  # extracted before markers: zip members only
    assert download(spec, out, force=True, progress=False).read_text() == RATINGS
    assert _leftovers(out) == ["toy", "toy.zip"]  # no temp left beside it


def test_local_archive_is_verified(toy_zip: Path, tmp_path: Path) -> None:
    spec = replace(_spec(toy_zip), url="file:///nonexistent/never-used.zip")
    assert download(spec, tmp_path / "d", archive=toy_zip, progress=False).is_file()
    with pytest.raises(ValueError, match="md5 mismatch"):
        download(replace(spec, md5="f" * 32), tmp_path / "e", archive=toy_zip, progress=False)
    assert not (tmp_path / "e").exists()
    with pytest.raises(FileNotFoundError, match="--archive"):
        verify_file(tmp_path / "missing.zip", spec)


def test_zip_without_ratings_member_is_rejected(tmp_path: Path) -> None:
    path = _zip(tmp_path / "x.zip", {"toy/movies.csv": "movieId,title\n"})
    with pytest.raises(ValueError, match="toy/ratings.csv is missing"):
        extract(path, _spec(path), tmp_path / "out")
    assert not (tmp_path / "out" / "toy").exists()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_corrupt_member_fails_crc_and_leaves_nothing(tmp_path: Path, method: int) -> None:
    data = bytearray(
        _zip(tmp_path / "s.zip", {"toy/ratings.csv": RATINGS * 50}, method).read_bytes()
    )
    with zipfile.ZipFile(tmp_path / "s.zip") as zf:
        info = zf.getinfo("toy/ratings.csv")
    # Flip one byte inside the member's payload (after the 30-byte local header and name): a
    # stored member then fails its CRC, a deflated one fails to decompress.
    offset = info.header_offset + 30 + len(info.filename) + 5
    data[offset] ^= 0xFF
    broken = tmp_path / "broken.zip"
    broken.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="damaged zip|CRC"):
        extract(broken, _spec(broken), out)
    assert _leftovers(out) == []


def test_not_a_zip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "fake.zip"
    path.write_text("<html>404</html>")
    with pytest.raises(ValueError, match="not a valid zip"):
        extract(path, _spec(path), tmp_path / "out")


def test_cli_with_url_reports_mismatch_as_one_line(toy_zip: Path, tmp_path: Path, capsys) -> None:
    # ml-1m pins an MD5: a toy archive served under its name must be refused with exit code 2.
    bad = _zip(tmp_path / "ml-1m.zip", {"ml-1m/ratings.dat": "1::1::5::978300760\n"})
    code = cli.main(
        ["download", "ml-1m", "--out", str(tmp_path / "d"), "--url", bad.as_uri(), "--quiet"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "md5 mismatch" in err and ARCHIVES["ml-1m"].md5 in err
    assert _leftovers(tmp_path / "d") == []


def test_cli_records_its_config_beside_the_zip(tmp_path: Path, capsys) -> None:
    from ncf.core.config import read_config

    # ml-latest-small pins neither size nor md5: any zip with its ratings file is accepted.
    zipped = _zip(tmp_path / "small.zip", {"ml-latest-small/ratings.csv": RATINGS})
    out = tmp_path / "d"
    argv = ["download", "ml-latest-small", "--out", str(out), "--archive", str(zipped), "--quiet"]
    assert cli.main(argv) == 0
    assert (out / "ml-latest-small" / "ratings.csv").read_text() == RATINGS
    assert read_config(out / "ml-latest-small.config.json", "download")["archive"] == str(zipped)
    assert cli.main(["download"]) == 2
    assert "DATASET: required" in capsys.readouterr().err
