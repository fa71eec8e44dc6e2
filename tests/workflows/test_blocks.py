"""The partitioned ETL's reader: blocks read alone give what the whole-file reader gives."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from ncf.workflows.blocks import plan_blocks, read_all
from ncf.workflows.columns import ColumnMap, parse_columns
from ncf.workflows.io import read_ratings
from tests.workflows.test_io import HEADER, ratings_files, write

WHERE = re.compile(r"line \d+(, column '[^']*')?")


def read_blocked(path, block_bytes=16, columns=None):
    return read_all(plan_blocks(path, columns or ColumnMap(), block_bytes=block_bytes))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=ratings_files())
def test_fuzzed_files_read_in_blocks_as_read_whole(tmp_path, case):
    # Blocks of 16 bytes cut most lines' neighbours apart: every block is parsed and validated
    # alone, yet the rows (or the first bad line) are the whole-file reader's.
    data, dat, gz = case
    name = ("ratings.dat" if dat else "ratings.csv") + (".gz" if gz else "")
    path = write(tmp_path, gzip.compress(data, mtime=0) if gz else data, name)
    try:
        whole = read_ratings(path)
    except ValueError as exc:
        with pytest.raises(ValueError) as info:
            read_blocked(path)
        # The same line and column (the wording may differ: a block converts the values Arrow's
        # whole-file read could not, so it may describe a typed value where the other quotes text).
        where = WHERE.search(str(exc))
        if where is None:  # about the whole file (empty, no ratings): word for word
            assert str(info.value) == str(exc)
        else:
            assert str(path) in str(info.value)
            assert WHERE.search(str(info.value))[0] == where[0], str(info.value)
        return
    cols = read_blocked(path)
    for key, values in (("user", whole.user), ("item", whole.item), ("time", whole.time)):
        np.testing.assert_array_equal(cols[key], values)
    assert (np.diff(cols["row"]) > 0).all()  # increasing in file order (--ties file-order)


def test_blocks_cut_at_line_starts(tmp_path):
    lines = [f"{i},{i % 7},4.0,{1000 + i}" for i in range(500)]
    path = write(tmp_path, HEADER + "\n" + "\n".join(lines) + "\n")
    blocks = plan_blocks(path, ColumnMap(), block_bytes=1000)
    assert len(blocks) > 5
    data = path.read_bytes()
    assert all(data[b.start - 1 : b.start] == b"\n" for b in blocks)
    assert read_all(blocks)["user"].tolist() == list(range(500))


def test_a_bad_value_deep_in_a_later_block_names_its_line(tmp_path):
    lines = [f"{i % 97},{i % 89},3.5,{i}" for i in range(20_000)]
    lines[15_000] = "1,x1,3,4"
    path = write(tmp_path, HEADER + "\n" + "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 15002, column 'movieId': value 'x1'"):
        read_blocked(path, block_bytes=4096)
    lines[15_000] = "1,-4,3,4"  # converts, then fails validation inside its block
    path.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"line 15002, column 'movieId': value -4"):
        read_blocked(path, block_bytes=4096)


def parquet_table(n: int = 50) -> pa.Table:
    return pa.table(
        {
            "uid": pa.array(np.arange(n) % 9, pa.int64()),
            "iid": pa.array(np.arange(n) * 3, pa.int32()),
            "when": pa.array((np.arange(n) + 10**9) * 1000, pa.timestamp("ms")),
        }
    )


def test_parquet_folder_with_other_names_and_a_timestamp_column(tmp_path):
    folder = tmp_path / "ratings"
    folder.mkdir()
    table = parquet_table()
    # Natural order: part_2 before part_10; small row groups make several blocks.
    pq.write_table(table.slice(0, 20), folder / "part_2.parquet", row_group_size=7)
    pq.write_table(table.slice(20), folder / "part_10.parquet", row_group_size=7)
    columns = parse_columns("user=uid,item=iid,time=when")
    blocks = plan_blocks(folder, columns, block_rows=7)  # a block per row group
    assert len(blocks) == 3 + 5 and len(plan_blocks(folder, columns)) == 2  # by default: per file
    np.testing.assert_array_equal(read_all(blocks)["row"], np.arange(50))
    r = read_ratings(folder, columns)
    np.testing.assert_array_equal(r.user, np.arange(50) % 9)
    np.testing.assert_array_equal(r.item, np.arange(50) * 3)
    np.testing.assert_array_equal(r.time, np.arange(50) + 10**9)
    np.testing.assert_array_equal(r.row, np.arange(50))
    assert r.user.dtype == np.int32 and r.time.dtype == np.int64


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.drop(["iid"]), r"no column 'iid'; the file has \['uid', 'when'\]"),
        (
            lambda t: t.set_column(1, "iid", pa.array([str(i) for i in range(50)])),
            r"column 'iid' has type string; expected a non-negative integer id",
        ),
        (
            lambda t: t.set_column(0, "uid", pa.array([1] * 30 + [None] + [1] * 19, pa.int64())),
            r"part\.parquet, row 31, column 'uid': an empty value; expected a non-negative",
        ),
        (
            lambda t: t.set_column(1, "iid", pa.array([1] * 44 + [2**31] + [1] * 5, pa.int64())),
            r"row 45, column 'iid': value 2147483648; expected a non-negative integer id below",
        ),
    ],
)
def test_bad_parquet_input_is_one_clear_line(tmp_path, change, message):
    path = tmp_path / "part.parquet"
    pq.write_table(change(parquet_table()), path, row_group_size=20)
    with pytest.raises(ValueError, match=message):
        read_ratings(path, parse_columns("user=uid,item=iid,time=when"))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("user=a,item=b", r"no time; expected --columns user=NAME,item=NAME,time=NAME"),
        ("user=a,item=b,time=a", r"one column for two roles"),
        ("user=a,item=b,time=c,score=d", r"'score=d' is not ROLE=NAME"),
    ],
)
def test_bad_columns_option(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_columns(spec)


def test_csv_with_other_column_names(tmp_path):
    path = write(tmp_path, "u,i,t,extra\n1,2,30,x\n4,5,60,y\n")
    r = read_ratings(path, parse_columns("user=u,item=i,time=t"))
    assert r.user.tolist() == [1, 4] and r.time.tolist() == [30, 60]
    with pytest.raises(ValueError, match=r"line 3, column 'i': value -5"):
        read_ratings(
            write(tmp_path, "u,i,t\n1,2,30\n4,-5,60\n"), parse_columns("user=u,item=i,time=t")
        )
    with pytest.raises(ValueError, match=r"missing column\(s\) \['userId'.*--columns"):
        read_ratings(path)
