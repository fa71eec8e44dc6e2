"""``ncf synth --format parquet``: the streamed generator's layout, what equals the CSV output,
bounded blocks, the planted structure kept across blocks, and the ``--force`` rules of a folder."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ncf import cli
from ncf.core import names
from ncf.core.atomic import OUTPUT_MARKER
from ncf.core.config import read_config
from ncf.sources import parts
from ncf.sources.synth import RATING_COUNTS, RATING_VALUES, SynthConfig, sizes
from ncf.sources.synth_blocks import generate_blocks, tail_start
from tests.sources.test_synth import _hit_rates

SCALE = 0.002  # 277 users, 1,000 items, 40,001 ratings
BLOCK = 8_000  # about five blocks
PART = 16_000  # two or three blocks per part file


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same config written as CSV (out/c) and as parquet (out/p)."""
    out = tmp_path_factory.mktemp("synth-parquet")
    common = ["synth", "--scale", str(SCALE), "--seed", "7"]
    assert cli.main([*common, "--out", str(out / "c")]) == 0
    parquet = ["--format", "parquet", "--block-ratings", str(BLOCK), "--part-ratings", str(PART)]
    assert cli.main([*common, *parquet, "--out", str(out / "p")]) == 0
    return out


def _frame(folder: Path) -> pd.DataFrame:
    return pq.read_table(folder).to_pandas()


def test_layout_dtypes_and_config(written: Path) -> None:
    folder = written / "p" / "ratings.parquet"
    assert sorted(p.name for p in (written / "p").iterdir()) == [
        "ratings.parquet",
        "ratings.parquet.config.json",
    ]  # nothing temporary left beside it
    files = sorted(p.name for p in folder.iterdir())
    assert files[0] == OUTPUT_MARKER and files[1:] == [
        f"part_{i:05d}.parquet" for i in range(len(files) - 1)
    ]
    rows = [pq.ParquetFile(folder / f).metadata.num_rows for f in files[1:]]
    assert len(rows) >= 2 and all(r >= PART for r in rows[:-1]) and sum(rows) == 40_001
    for f in files[1:]:
        assert pq.read_schema(folder / f).equals(parts.SCHEMA)  # int32, int32, float32, int64
    frame = _frame(folder)
    assert list(frame.columns) == list(names.RAW_COLUMNS)
    assert [str(t) for t in frame.dtypes] == ["int32", "int32", "float32", "int64"]
    recorded = read_config(written / "p" / "ratings.parquet.config.json", "synth")
    assert recorded["format"] == "parquet" and recorded["block_ratings"] == BLOCK


def test_what_equals_the_csv_output(written: Path) -> None:
    csv = pd.read_csv(written / "c" / "ratings.csv")
    par = _frame(written / "p" / "ratings.parquet")
    # Equal: the users and each one's number of ratings, the movieIds, the first and last second.
    pd.testing.assert_series_equal(
        csv.groupby(names.RAW_USER).size(), par.groupby(names.RAW_USER).size()
    )
    assert set(csv[names.RAW_ITEM]) == set(par[names.RAW_ITEM])
    assert par[names.RAW_ITEM].nunique() == sizes(SCALE).items  # every item rated
    for f in (min, max):
        assert f(csv[names.RAW_TIME]) == f(par[names.RAW_TIME])
    # Drawn from other streams: not the same rows.
    assert not np.array_equal(csv[names.RAW_ITEM].to_numpy(), par[names.RAW_ITEM].to_numpy())
    # ML-20m's value proportions, exact in each block to one rating per value.
    blocks = -(-len(par) // BLOCK) + 1
    share = par[names.RAW_RATING].value_counts().reindex(RATING_VALUES).to_numpy() / len(par)
    np.testing.assert_allclose(share, RATING_COUNTS / RATING_COUNTS.sum(), atol=blocks / len(par))
    # The rules of ratings.csv: sorted by (userId, movieId), no duplicate, no same-second tie.
    key = par[names.RAW_USER].to_numpy(np.int64) * 2**31 + par[names.RAW_ITEM].to_numpy()
    assert np.all(np.diff(key) > 0)
    ts = par.sort_values([names.RAW_USER, names.RAW_TIME])
    same_user = ts[names.RAW_USER].diff() == 0
    assert (ts[names.RAW_TIME].diff()[same_user] > 0).all()


def test_blocks_are_bounded_and_deterministic() -> None:
    cfg = SynthConfig(scale=0.01, seed=3, block_ratings=20_000)
    rows = [b[names.RAW_USER].size for b in generate_blocks(cfg)]
    assert len(rows) >= 10 and max(rows) <= 20_000 and sum(rows) == sizes(0.01).ratings
    first = next(generate_blocks(cfg))
    again = next(generate_blocks(cfg))
    for column in names.RAW_COLUMNS:
        np.testing.assert_array_equal(first[column], again[column])


def _peak_bytes(cfg: SynthConfig) -> int:
    """Peak traced allocation while consuming the generator (each block dropped when the next
    comes: what the parquet writer does). numpy reports its arrays to tracemalloc."""
    tracemalloc.start()
    try:
        for _ in generate_blocks(cfg):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_follows_the_block_not_the_table() -> None:
    table = SynthConfig(scale=0.01, seed=3, block_ratings=10**9)  # one block: the whole table
    blocked = SynthConfig(scale=0.01, seed=3, block_ratings=10_000)  # 20 blocks
    assert _peak_bytes(blocked) < 0.35 * _peak_bytes(table)


@pytest.mark.parametrize(
    ("sizes_", "budget", "expected"),
    [([5, 5, 5], 5, 2), ([5, 5, 5], 6, 1), ([5, 5, 2], 5, 1), ([5, 5, 5], 100, 0), ([9], 5, 0)],
)
def test_tail_start(sizes_: list[int], budget: int, expected: int) -> None:
    assert tail_start(np.array(sizes_), budget) == expected


def test_planted_structure_survives_the_blocks() -> None:
    cfg = SynthConfig(scale=0.005, seed=11, block_ratings=25_000)  # four blocks
    blocks = list(generate_blocks(cfg))
    cols = {c: np.concatenate([b[c] for b in blocks]) for c in names.RAW_COLUMNS}
    hr = _hit_rates(cols)
    assert hr["svd"] > hr["pop"] + 0.05, hr  # as test_synth's one-block figure


def test_force_replaces_only_what_synth_wrote(tmp_path: Path, capsys) -> None:
    args = ["synth", "--scale", "0.001", "--format", "parquet", "--out", str(tmp_path / "d")]
    assert cli.main(args) == 0
    assert cli.main(args) == 2
    assert "pass --force" in capsys.readouterr().err
    assert cli.main([*args, "--seed", "2", "--force"]) == 0
    assert read_config(tmp_path / "d" / "ratings.parquet.config.json", "synth")["seed"] == 2
    other = tmp_path / "theirs.parquet"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    out = ["synth", "--scale", "0.001", "--format", "parquet", "--out", str(other), "--force"]
    assert cli.main(out) == 2
    assert "not written by this project" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["mine.txt"]
    record = tmp_path / "e" / "ratings.parquet.config.json"  # someone's file where ours would go
    record.parent.mkdir()
    record.write_text("keep")
    assert cli.main([*args[:-1], str(tmp_path / "e")]) == 2
    assert "is not a config file `ncf synth` wrote" in capsys.readouterr().err
    assert record.read_text() == "keep" and not (tmp_path / "e" / "ratings.parquet").exists()


@pytest.mark.parametrize(
    ("fmt", "out", "message"),
    [
        ("parquet", "r.csv", "--format parquet writes a folder"),
        ("csv", "r.parquet", "add --format"),
    ],
)
def test_an_out_of_the_other_format_is_one_line(tmp_path, capsys, fmt, out, message) -> None:
    argv = ["synth", "--scale", "0.001", "--format", fmt, "--out", str(tmp_path / out)]
    assert cli.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert len(err) == 1 and message in err[0], err
    assert list(tmp_path.iterdir()) == []
