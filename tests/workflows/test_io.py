"""Reading and validating ratings files: formats, one test per kind of bad input, and fuzzing."""

from __future__ import annotations

import bz2
import gzip
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ncf.workflows.io import detect_format, read_ratings

HEADER = "userId,movieId,rating,timestamp"


def write(tmp_path: Path, data: str | bytes, name: str = "ratings.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_reads_csv_columns_by_name(tmp_path):
    # Column order comes from the header; extra columns are ignored.
    path = write(tmp_path, "timestamp,rating,movieId,extra,userId\n10,4.5,7,x,1\n11,0.5,8,y,2\n")
    r = read_ratings(path)
    np.testing.assert_array_equal(r.user, [1, 2])
    np.testing.assert_array_equal(r.item, [7, 8])
    np.testing.assert_array_equal(r.time, [10, 11])
    assert (r.user.dtype, r.item.dtype, r.time.dtype) == (np.int32, np.int32, np.int64)
    assert r.format == "csv"


def test_reads_ml1m_dat(tmp_path):
    path = write(tmp_path, "1::1193::5::978300760\n1::661::3::978302109\n", "ratings.dat")
    r = read_ratings(path)
    assert r.format == "dat"
    np.testing.assert_array_equal(r.user, [1, 1])
    np.testing.assert_array_equal(r.item, [1193, 661])
    np.testing.assert_array_equal(r.time, [978300760, 978302109])


def test_dat_detected_by_content(tmp_path):
    path = write(tmp_path, "3::4::2::100\n", "ratings.txt")
    assert detect_format(path) == "dat"
    assert read_ratings(path).item.tolist() == [4]


def test_bom_crlf_and_quoted_header(tmp_path):
    data = b'\xef\xbb\xbf"userId","movieId","rating","timestamp"\r\n5,6,3.5,7\r\n8,9,1,10\r\n'
    r = read_ratings(write(tmp_path, data))
    assert r.user.tolist() == [5, 8] and r.time.tolist() == [7, 10]


BAD_INPUTS = [
    # (name, file content, regex the message must match)
    ("empty", "", r"ratings\.csv is empty"),
    ("header only", HEADER + "\n", r"has a header but no ratings"),
    (
        "renamed column",
        "user,movieId,rating,timestamp\n1,2,3,4\n",
        r"line 1 .*missing column\(s\) \['userId'\]",
    ),
    (
        "missing column",
        "userId,movieId,rating\n1,2,3\n",
        r"line 1 .*missing column\(s\) \['timestamp'\]",
    ),
    ("no header", "1,2,3,4\n", r"line 1 .*header line is missing"),
    ("wrong separator", "userId;movieId;rating;timestamp\n1;2;3;4\n", r"separator must be ','"),
    (
        "negative id",
        HEADER + "\n1,2,3,4\n-7,2,3,4\n",
        r"line 3, column 'userId': value -7.*non-negative integer id",
    ),
    (
        "non-integer id",
        HEADER + "\n1,2,3,4\n1,2.5,3,4\n",
        r"line 3, column 'movieId': value '2\.5'.*non-negative integer id",
    ),
    ("text id", HEADER + "\n1,abc,3,4\n", r"line 2, column 'movieId': value 'abc'"),
    (
        "huge id",
        HEADER + "\n1,2,3,4\n1,2,3,4\n3000000000,2,3,4\n",
        r"line 4, column 'userId': value '3000000000'",
    ),
    ("missing value", HEADER + "\n1,,3,4\n", r"line 2, column 'movieId': an empty value"),
    (
        "NaN rating",
        HEADER + "\n1,2,3,4\n1,2,NaN,4\n",
        r"line 3, column 'rating': value nan.*between 0\.5 and 5",
    ),
    ("rating too high", HEADER + "\n1,2,5.5,4\n", r"line 2, column 'rating': value 5\.5"),
    ("rating too low", HEADER + "\n1,2,0,4\n", r"line 2, column 'rating': value 0\.0"),
    (
        "float timestamp",
        HEADER + "\n1,2,3,4\n1,2,3,4.5\n",
        r"line 3, column 'timestamp': value '4\.5'.*integer Unix timestamp",
    ),
    ("negative timestamp", HEADER + "\n1,2,3,-4\n", r"line 2, column 'timestamp': value -4"),
    ("short line", HEADER + "\n1,2,3,4\n1,2,3\n", r"line 3: found 3 field\(s\) in '1,2,3'"),
    ("long line", HEADER + "\n1,2,3,4,5\n", r"line 2: found 5 field\(s\)"),
    ("empty line", HEADER + "\n1,2,3,4\n\n1,2,3,4\n", r"line 3 is empty"),
    ("NA text", HEADER + "\n1,NA,3,4\n", r"line 2, column 'movieId': value 'NA'"),
]


@pytest.mark.parametrize("name,data,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_clear_error(tmp_path, name, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ValueError, match=message) as info:
        read_ratings(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "data,message",
    [
        ("1::2::5::10\n2:3::4::11\n", r"line 2: found 6 field\(s\)"),
        ("1::2::5::10\n2::3:x:4::11\n", r"line 2: malformed '::' separator"),
        ("1::2::9::10\n", r"line 1, column 'rating': value 9\.0"),
    ],
)
def test_bad_dat(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        read_ratings(write(tmp_path, data, "ratings.dat"))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no such ratings file"):
        read_ratings(tmp_path / "nope.csv")


def test_error_line_found_deep_in_a_big_file(tmp_path):
    # Arrow parses in parallel blocks and reports no row: the diagnostic pass must find it.
    rows = [f"{i % 97},{i % 89},3.5,{i}" for i in range(300_000)]
    rows[250_000] = "1,x1,3,4"
    path = write(tmp_path, HEADER + "\n" + "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"line 250002, column 'movieId': value 'x1'"):
        read_ratings(path)


# ---- fuzzing against a reference parser of the documented format ---------------------------

INT_MAX = {"userId": 2**31 - 1, "movieId": 2**31 - 1, "timestamp": 2**63 - 1}
FLOAT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def _valid(name: str, text: str) -> bool:
    text = text.strip(" \t")
    if name == "rating":
        return bool(FLOAT.match(text)) and 0.5 <= float(text) <= 5
    return bool(re.fullmatch(r"[0-9]{1,19}", text)) and int(text) <= INT_MAX[name]


def reference(data: bytes, dat: bool) -> tuple[str, object]:
    """("ok", rows) or ("bad", first bad line number / 'empty' / 'no rows'), per the io docstring."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    if not data:
        return "bad", "empty"
    raw = data.split(b"\n")
    if data.endswith(b"\n"):
        raw = raw[:-1]
    not_utf8 = set()  # lines that are not UTF-8: bad where they come
    for number, line in enumerate(raw, start=1):
        try:
            line.decode()
        except UnicodeDecodeError:
            not_utf8.add(number)
    if 1 in not_utf8:
        return "bad", 1
    text = data.decode("utf-8", "surrogateescape")
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    if text.endswith("\n"):
        lines = lines[:-1]
    dat = dat or "::" in lines[0]
    if dat:
        names, sep, first = ["userId", "_", "movieId", "_", "rating", "_", "timestamp"], ":", 1
    else:
        names, sep, first = lines[0].split(","), ",", 2
        if sorted(n for n in names if n in INT_MAX or n == "rating") != sorted(
            INT_MAX.keys() | {"rating"}
        ):
            return "bad", 1
    body = lines[first - 1 :]
    if not body:
        return "bad", "no rows"
    rows = []
    for number, line in enumerate(body, start=first):
        if number in not_utf8:
            return "bad", number
        fields = line.split(sep)
        if len(fields) != len(names) or not all(
            (f == "" if n == "_" else _valid(n, f)) for n, f in zip(names, fields, strict=True)
        ):
            return "bad", number
        rows.append({n: f for n, f in zip(names, fields, strict=True) if n != "_"})
    return "ok", rows


ID_TOKENS = st.one_of(
    st.integers(0, 300).map(str),
    st.sampled_from(
        ["-3", "2147483647", "2147483648", "99999999999", "1.5", "abc", "", "NaN", " 7"]
    ),
)
RATING_TOKENS = st.sampled_from(
    ["0.5", "3", "4.5", "5.0", "5", "0", "5.5", "-1", "NaN", "x", "", "2e0"]
)
TIME_TOKENS = st.one_of(
    st.integers(0, 2**40).map(str), st.sampled_from(["-5", "1.5", "ts", "", "9223372036854775808"])
)


@st.composite
def ratings_files(draw) -> tuple[bytes, bool]:
    dat = draw(st.booleans()) and draw(st.booleans())  # a quarter of the cases are ML-1M files
    n_rows = draw(st.integers(0, 6))
    rows = []
    for _ in range(n_rows):
        fields = [draw(ID_TOKENS), draw(ID_TOKENS), draw(RATING_TOKENS), draw(TIME_TOKENS)]
        n_fields = draw(st.sampled_from([4, 4, 4, 4, 3, 5]))  # wrong column counts sometimes
        fields = (fields + ["1"])[:n_fields]
        sep = (
            draw(st.sampled_from(["::"] * 6 + [":", ","]))
            if dat
            else draw(st.sampled_from([","] * 8 + [";", "\t"]))
        )
        line = sep.join(fields)
        if draw(st.integers(0, 9)) == 0:
            line = line[: draw(st.integers(0, len(line)))]  # truncated line
        if draw(st.integers(0, 14)) == 0:  # a byte that is not UTF-8
            at = draw(st.integers(0, len(line)))
            line = line[:at] + draw(st.sampled_from(["\udcff", "\udce9"])) + line[at:]
        rows.append(line)
    if not dat:
        header = draw(
            st.sampled_from(
                [
                    HEADER,
                    HEADER,
                    HEADER,
                    "movieId,userId,timestamp,rating",
                    "user,movieId,rating,timestamp",
                    "userId,movieId,rating",
                ]
            )
        )
        rows.insert(0, header)
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(rows) + (end if rows and draw(st.booleans()) else "")
    bom = b"\xef\xbb\xbf" if draw(st.integers(0, 4)) == 0 else b""
    return bom + text.encode("utf-8", "surrogateescape"), dat, draw(st.integers(0, 4)) == 0


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=ratings_files())
# a bad value on line 3 before a line that is not UTF-8: line 3 is reported
@example(
    case=(b"\xef\xbb\xbfuserId,movieId,rating,timestamp\n0,0,0.5,0\n0,0,0.5,-5\n\xff", False, True)
)
def test_fuzzed_files_load_as_documented_or_fail_clearly(tmp_path, case):
    data, dat, gz = case  # a fifth of the files are gzip-compressed, named .gz
    name = ("ratings.dat" if dat else "ratings.csv") + (".gz" if gz else "")
    path = write(tmp_path, gzip.compress(data, mtime=0) if gz else data, name)
    verdict, detail = reference(data, dat)
    if verdict == "ok":
        r = read_ratings(path)
        assert r.user.tolist() == [int(row["userId"]) for row in detail]
        assert r.item.tolist() == [int(row["movieId"]) for row in detail]
        assert r.time.tolist() == [int(row["timestamp"]) for row in detail]
        return
    with pytest.raises(ValueError) as info:
        read_ratings(path)
    message = str(info.value)
    assert str(path) in message
    if detail == "empty":
        assert "is empty" in message
    elif detail == "no rows":
        assert "no ratings" in message
    else:
        assert f"line {detail}" in message, message


def test_a_row_that_is_not_utf8_is_named_by_line_and_column(tmp_path):
    path = write(tmp_path, f"{HEADER}\n1,2,3.0,100\n1,3".encode() + b"\xff,3.0,101\n")
    with pytest.raises(
        ValueError, match=r"line 3: bytes that are not UTF-8 \(b'1,3\\xff,3.0,101'\)"
    ):
        read_ratings(path)


@pytest.mark.parametrize("suffix, pack", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_compressed_input_is_read_decompressed(tmp_path, suffix, pack):
    text = f"{HEADER}\n1,2,3.0,100\n4,5,4.5,101\n".encode()
    plain = read_ratings(write(tmp_path, text))
    packed = read_ratings(write(tmp_path, pack(text), "ratings.csv" + suffix))
    for col in ("user", "item", "time"):
        np.testing.assert_array_equal(getattr(packed, col), getattr(plain, col))


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("ratings.csv", gzip.compress(b"userId,movieId,rating,timestamp\n", mtime=0), "gzip-compressed but not named"),
        ("ml-20m.zip", b"PK\x03\x04rest", "is a zip archive: unpack it first"),
    ],
    ids=["gzip-named-csv", "zip"],
)  # fmt: skip
def test_compressed_input_it_cannot_read_is_named(tmp_path, name, data, message):
    with pytest.raises(ValueError, match=message):
        read_ratings(write(tmp_path, data, name))
