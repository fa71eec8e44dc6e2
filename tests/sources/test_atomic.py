"""`ncf convert`: RecBole atomic .inter files as ratings.csv, bad lines named, nothing half-written."""

from __future__ import annotations

import pandas as pd
import pytest

from ncf.core import names
from ncf.sources.atomic import convert

HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"


def _inter(tmp_path, body: str, header: str = HEADER):
    path = tmp_path / "x.inter"
    path.write_text(header + body)
    return path


def test_rows_kept_in_file_order_with_ratings_csv_columns(tmp_path):
    inter = _inter(tmp_path, "196\t242\t3\t881250949\n186\t302\t3.5\t891717742\n196\t10\t1\t5\n")
    out = tmp_path / "ratings.csv"
    assert convert(inter, out) == 3
    frame = pd.read_csv(out)
    assert tuple(frame.columns) == names.RAW_COLUMNS
    assert frame.values.tolist() == [
        [196, 242, 3.0, 881250949],
        [186, 302, 3.5, 891717742],
        [196, 10, 1.0, 5],
    ]


def test_fields_found_by_name_in_any_order(tmp_path):
    header = "timestamp:float\titem_id:token\tuser_id:token\trating:float\textra:token_seq\n"
    inter = _inter(tmp_path, "7\t2\t1\t4\ta b\n", header)
    convert(inter, tmp_path / "r.csv")
    assert pd.read_csv(tmp_path / "r.csv").values.tolist() == [[1, 2, 4.0, 7]]


@pytest.mark.parametrize(
    ("body", "header", "message"),
    [
        ("1\t2\t3\t4\n", "user_id:token\titem_id:token\trating:float\n", "lacks ['timestamp']"),
        ("1\t2\t3\t4\nu7\t2\t3\t4\n", HEADER, "line 3, column 'user_id': 'u7'"),
        ("1\t2\t3\t4\n1\t2.5\t3\t4\n", HEADER, "line 3, column 'item_id': '2.5'"),
        ("1\t2\tgood\t4\n", HEADER, "line 2, column 'rating': 'good' is not a number"),
    ],
)
def test_bad_input_named_and_nothing_written(tmp_path, body, header, message):
    inter = _inter(tmp_path, body, header)
    out = tmp_path / "ratings.csv"
    with pytest.raises(ValueError, match="x.inter") as err:
        convert(inter, out)
    assert message in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == [inter]


def test_cli_writes_the_csv_and_its_config_and_needs_both_paths(tmp_path, capsys):
    from ncf.cli import main
    from ncf.core.config import read_config

    inter = _inter(tmp_path, "196\t242\t3\t881250949\n")
    out = tmp_path / "d"
    out.mkdir()
    assert main(["convert", str(inter), "--out", str(out)]) == 0
    assert pd.read_csv(out / "ratings.csv").values.tolist() == [[196, 242, 3.0, 881250949]]
    assert read_config(out / "ratings.config.json", "convert")["input"] == str(inter)
    assert main(["convert", "--out", str(out)]) == 2
    assert "INPUT: required" in capsys.readouterr().err


def test_cli_force_replaces_only_what_convert_wrote(tmp_path, capsys):
    from ncf.cli import main

    inter = _inter(tmp_path, "196\t242\t3\t881250949\n")
    out = tmp_path / "r.csv"
    out.write_text("user data")
    for force in ([], ["--force"]):  # a file ncf convert did not write: refused either way
        assert main(["convert", str(inter), "--out", str(out), *force]) == 2
        assert "not written by `ncf convert`" in capsys.readouterr().err
        assert out.read_text() == "user data"
    out.unlink()
    assert main(["convert", str(inter), "--out", str(out)]) == 0
    assert main(["convert", str(inter), "--out", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["convert", str(inter), "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.config.json", "r.csv", "x.inter"]
    assert main(["convert", str(inter), "--out", str(inter), "--force"]) == 2
    assert "is the command's input" in capsys.readouterr().err
