"""``ncf expand``: the Kronecker expansion's statistics on real data (ml-latest-small at MLPerf's
factors), its id scheme, determinism, bounded blocks, and one-line errors on bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ncf import cli
from ncf.core import names
from ncf.core.atomic import OUTPUT_MARKER
from ncf.core.config import read_config
from ncf.sources import parts
from ncf.sources.expand import (
    MLPERF_ITEMS,
    MLPERF_KEEP,
    MLPERF_USERS,
    ExpandConfig,
    expand_blocks,
    kept_cells,
    prepare,
)
from ncf.sources.ratings_in import read_ratings

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "data" / "ml-latest-small" / "ratings.csv"  # 100,836 ratings, 610 users


def _expand(columns: dict[str, np.ndarray], **settings) -> dict[str, np.ndarray]:
    cfg = ExpandConfig(input=Path("in.csv"), out=Path("out.parquet"), **settings)
    blocks = list(expand_blocks(prepare(columns), cfg))
    return {c: np.concatenate([b[c] for b in blocks]) for c in names.RAW_COLUMNS}


@pytest.fixture(scope="module")
def small() -> dict[str, np.ndarray]:
    return read_ratings(SMALL)


@pytest.fixture(scope="module")
def mlperf(small) -> dict[str, np.ndarray]:
    """ml-latest-small at MLPerf's factors (x16 users, x32 items, keep 0.1208): 6.2M ratings."""
    return _expand(small)


def top_share(items: np.ndarray, top: float = 0.01) -> float:
    """Share of the ratings on the ``top`` most rated fraction of the rated items."""
    counts = np.bincount(items)
    counts = np.sort(counts[counts > 0])[::-1]
    return counts[: max(1, round(top * counts.size))].sum() / counts.sum()


def per_user(users: np.ndarray) -> np.ndarray:
    """Ratings per user: quantiles 10, 50, 90 and the mean."""
    counts = np.bincount(users)
    counts = counts[counts > 0]
    return np.append(np.percentile(counts, [10, 50, 90]), counts.mean())


def test_statistics_are_kept_within_ten_percent(small, mlperf) -> None:
    growth = MLPERF_USERS * MLPERF_ITEMS * MLPERF_KEEP  # 61.8 ratings per source rating
    rows = mlperf[names.RAW_USER].size
    assert abs(rows / (small[names.RAW_USER].size * growth) - 1) < 0.01
    source, expanded = top_share(small[names.RAW_ITEM]), top_share(mlperf[names.RAW_ITEM])
    assert abs(expanded / source - 1) < 0.10, (source, expanded)  # measured: 0.157 vs 0.153
    scaled = per_user(mlperf[names.RAW_USER]) / (MLPERF_ITEMS * MLPERF_KEEP)  # per user copy
    np.testing.assert_allclose(scaled, per_user(small[names.RAW_USER]), rtol=0.10)
    assert np.count_nonzero(np.bincount(mlperf[names.RAW_USER])) == 610 * MLPERF_USERS


def test_ids_ratings_and_times_come_from_the_source_rating(small) -> None:
    out = _expand(small, users=3, items=4, keep=0.5)
    src = prepare(small).columns
    key = src[names.RAW_USER].astype(np.int64) << 32 | src[names.RAW_ITEM]  # sorted, unique here
    user, copy_a = np.divmod(out[names.RAW_USER].astype(np.int64), 3)
    item, copy_b = np.divmod(out[names.RAW_ITEM].astype(np.int64), 4)
    row = np.searchsorted(key, user << 32 | item)
    assert np.array_equal(key[row], user << 32 | item)  # every row is a copy of a source rating
    for column in (names.RAW_RATING, names.RAW_TIME):
        assert np.array_equal(out[column], src[column][row])
    assert np.array_equal(np.unique(copy_a), np.arange(3))
    assert np.array_equal(np.unique(copy_b), np.arange(4))
    out_key = out[names.RAW_USER].astype(np.int64) << 32 | out[names.RAW_ITEM]
    assert np.all(np.diff(out_key) > 0)  # sorted by (userId, movieId), no duplicate


def test_keep_one_is_the_whole_kronecker_product() -> None:
    columns = {
        names.RAW_USER: np.array([3, 1, 1], np.int32),
        names.RAW_ITEM: np.array([5, 20, 10], np.int32),
        names.RAW_RATING: np.array([1.0, 2.0, 3.0], np.float32),
        names.RAW_TIME: np.array([30, 20, 10], np.int64),
    }
    out = _expand(columns, users=2, items=3, keep=1.0)
    # user 1 -> 2, 3; user 3 -> 6, 7; item 10 -> 30..32, 20 -> 60..62, 5 -> 15..17
    expected = [
        (u, i, r, t)
        for src_u, copies in ((1, (2, 3)), (3, (6, 7)))
        for u in copies
        for src_i, r, t in ((10, 3.0, 10), (20, 2.0, 20), (5, 1.0, 30))
        if (src_u == 1) == (src_i != 5)
        for i in range(src_i * 3, src_i * 3 + 3)
    ]
    got = list(zip(*(out[c].tolist() for c in names.RAW_COLUMNS), strict=True))
    assert got == expected


@pytest.mark.parametrize(("cells", "keep"), [(1, 1.0), (7, 1.0), (100_000, 0.1208), (50, 0.5)])
def test_kept_cells(cells: int, keep: float) -> None:
    kept = kept_cells(np.random.default_rng(0), cells, keep)
    assert np.all(np.diff(kept) > 0) and kept.min() >= 0 and kept.max() < cells
    if keep == 1.0:
        np.testing.assert_array_equal(kept, np.arange(cells))
    elif cells == 100_000:  # binomial: sd 103, so within 5 sd
        assert abs(kept.size - cells * keep) < 520


def test_deterministic_and_independent_of_the_blocks(small) -> None:
    few = {c: v[:20_000] for c, v in small.items()}
    a = _expand(few, users=4, items=8, seed=3)
    b = _expand(few, users=4, items=8, seed=3, block_ratings=5_000)  # many small blocks
    c = _expand(few, users=4, items=8, seed=4)
    for column in names.RAW_COLUMNS:
        np.testing.assert_array_equal(a[column], b[column])
    assert not np.array_equal(a[names.RAW_ITEM], c[names.RAW_ITEM][: a[names.RAW_ITEM].size])


def test_blocks_are_bounded(small) -> None:
    cfg = ExpandConfig(input=SMALL, out=Path("o.parquet"), users=4, items=8, block_ratings=50_000)
    rows = [b[names.RAW_USER].size for b in expand_blocks(prepare(small), cfg)]
    heaviest = 2_698 * 8 * MLPERF_KEEP * 1.5  # ml-latest-small's heaviest user, with room
    assert len(rows) >= 5 and max(rows) <= max(50_000 * 1.1, heaviest)


def _tiny(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in ["userId,movieId,rating,timestamp", *lines]))
    return path


def test_cli_layout_force_and_config(tmp_path: Path, capsys) -> None:
    source = _tiny(tmp_path / "r.csv", [f"{u},{i},4.0,{100 + i}" for u in (1, 2) for i in (1, 2)])
    args = ["expand", str(source), "--out", str(tmp_path / "x"), "--users", "2", "--items", "3"]
    assert cli.main([*args, "--keep", "1"]) == 0
    folder = tmp_path / "x" / parts.DEFAULT_FOLDER
    assert sorted(p.name for p in folder.iterdir()) == [OUTPUT_MARKER, "part_00000.parquet"]
    table = pq.read_table(folder)
    assert table.schema.equals(parts.SCHEMA) and table.num_rows == 4 * 6
    recorded = read_config(tmp_path / "x" / "ratings.parquet.config.json", "expand")
    assert recorded["users"] == 2 and recorded["keep"] == 1.0
    assert cli.main(args) == 2
    assert "pass --force" in capsys.readouterr().err
    assert cli.main([*args, "--force", "--keep", "0.5"]) == 0
    assert pq.read_table(folder).num_rows < 4 * 6
    # The folder is an input of the next expansion (chained), never its own output.
    again = ["expand", str(folder), "--out", str(folder), "--force"]
    assert cli.main(again) == 2
    assert "lies inside" in capsys.readouterr().err
    assert cli.main(["expand", str(folder), "--out", str(tmp_path / "y.parquet")]) == 0


def _error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("lines", "flags", "expected"),
    [
        (["1,2,4.0,100", "1,3,9.0,101"], [], "line 3, column 'rating': value 9.0"),
        (["1,2,4.0,100", "1,x,4.0,101"], [], "line 3, column 'movieId': value 'x'"),
        (["1,2,4.0,100", "1,3,4.0"], [], "line 3: 3 field(s)"),
        (["1,2,4.0,-5"], [], "line 2, column 'timestamp': value -5"),
        ([f"{2**30},2,4.0,100"], ["--users", "4"], "use --users 1 or less"),
        ([], [], "holds no ratings"),
        (["1,2,4.0,100", ""], [], "line 3 is empty"),
        (["1,2,4.0,100"], ["--keep", "0"], "--keep 0.0: must be in (0, 1]"),
        (["1,2,4.0,100"], ["--users", "0"], "--users 0: must be >= 1"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, lines, flags, expected) -> None:
    source = _tiny(tmp_path / "r.csv", lines)
    out = tmp_path / "o.parquet"
    assert cli.main(["expand", str(source), "--out", str(out), *flags]) == 2
    line = _error(capsys)
    assert expected in line, line
    assert not out.exists()


def test_a_missing_input_or_header_is_one_line(tmp_path, capsys) -> None:
    missing = tmp_path / "none.csv"
    assert cli.main(["expand", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert f"{missing}: no such ratings file" in _error(capsys)
    headless = tmp_path / "h.csv"
    headless.write_text("1,2,4.0,100\n")
    assert cli.main(["expand", str(headless), "--out", str(tmp_path / "o")]) == 2
    assert "line 1 (header): missing column(s)" in _error(capsys)


def test_a_bad_parquet_input_is_one_line(tmp_path, capsys) -> None:
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.mkdir()
    (corrupt / "part_00000.parquet").write_bytes(b"PAR1 not really")
    assert cli.main(["expand", str(corrupt), "--out", str(tmp_path / "o1")]) == 2
    assert f"{corrupt}: not a readable parquet ratings table" in _error(capsys)
    partial = tmp_path / "partial.parquet"
    pq.write_table(pa.table({names.RAW_USER: [1], names.RAW_ITEM: [2]}), partial)
    assert cli.main(["expand", str(partial), "--out", str(tmp_path / "o2")]) == 2
    assert "lacks the column(s) ['rating', 'timestamp']" in _error(capsys)
