"""End to end on hand-made tables: filtering counts, exact outputs, errors that write nothing, reuse.

The exact-output cases run ``--holdout test`` (DLE's layout, the outputs of the code before
``--holdout`` existed); ``test_holdout.py`` covers ``--holdout valid,test`` and ``--ties``.
"""

from __future__ import annotations

import json

import pytest

from ncf.cli import main
from ncf.core.config import DEFAULT_SEED
from ncf.core.names import CONFIG_FILE, ITEM, NEGATIVES_DIR, TEST_DIR, TRAIN_DIR, USER, WORKFLOW_DIR
from tests.workflows.helpers import etl, metadata, needs_nvtabular, outputs

# user 10: items 1 (twice: t=5 and t=7, the later is kept), 2 (t=9), 3 (t=9: tie, larger id wins)
# user 20: items 1, 4 (latest), 5;  user 30: one rating -> dropped by --min-ratings 2
TABLE = """userId,movieId,rating,timestamp
10,1,4.0,5
10,2,3.5,9
20,1,1.0,1
30,2,5.0,1
10,3,2.0,9
20,4,4.0,3
10,1,4.5,7
20,5,0.5,2
"""


def pairs(frame) -> list[tuple[int, int]]:
    return sorted(zip(frame[USER].tolist(), frame[ITEM].tolist(), strict=True))


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text(TABLE)
    return path


def test_hand_made_table_pandas_engine(table, tmp_path):
    meta = etl(
        table, tmp_path / "out", eval_negatives=2, min_ratings=2, engine="pandas", holdout="test"
    )
    assert meta["dropped"] == {
        "duplicate_pairs": 1,
        "users_below_min_ratings": 1,
        "users_below_holdout_minimum": 0,
    }
    assert meta["dropped_users"] == {"below_min_ratings": 1, "below_holdout_minimum": 0}
    assert (meta["holdout"], meta["ties"], meta["holdout_min_interactions"]) == (
        "test",
        "item-id",
        1,
    )
    assert (meta["n_users"], meta["n_items"]) == (2, 5)
    data = outputs(tmp_path / "out")
    # sorted-unique ids: users 10->0, 20->1; items 1..5 -> 0..4
    assert pairs(data[TEST_DIR]) == [(0, 2), (1, 3)]
    assert pairs(data[TRAIN_DIR]) == [(0, 0), (0, 1), (1, 0), (1, 4)]
    # Only two unrated items per user: the negatives are exactly those.
    assert pairs(data[NEGATIVES_DIR]) == [(0, 3), (0, 4), (1, 1), (1, 2)]


@needs_nvtabular
def test_hand_made_table_nvtabular_engine(table, tmp_path):
    from ncf.workflows.workflow import import_nvtabular, quiet_merlin

    out = tmp_path / "out"
    meta = etl(table, out, eval_negatives=2, min_ratings=2, holdout="test")
    nvt = import_nvtabular()
    import pandas as pd

    with quiet_merlin():
        wf = nvt.Workflow.load(str(out / WORKFLOW_DIR))
        ids = wf.transform(
            pd.DataFrame(
                {"userId": [10, 10, 10, 20, 20, 20, 10, 20], "movieId": [1, 2, 3, 1, 4, 5, 4, 2]}
            )
        )
    u10, u20 = int(ids[USER][0]), int(ids[USER][3])
    i = {raw: int(code) for raw, code in zip([1, 2, 3, 1, 4, 5], ids[ITEM][:6], strict=True)}
    data = outputs(out)
    assert pairs(data[TEST_DIR]) == sorted([(u10, i[3]), (u20, i[4])])
    assert pairs(data[TRAIN_DIR]) == sorted([(u10, i[1]), (u10, i[2]), (u20, i[1]), (u20, i[5])])
    assert pairs(data[NEGATIVES_DIR]) == sorted(
        [(u10, i[4]), (u10, i[5]), (u20, i[2]), (u20, i[3])]
    )
    assert meta["dropped"]["duplicate_pairs"] == meta["dropped"]["users_below_min_ratings"] == 1
    # movieId 2 of dropped user 30 still has an id (user 10 rated it); nothing of user 30 remains.
    assert meta["n_users"] == 2 and meta["num_users"] == 5


@pytest.mark.parametrize(
    "content,options,message",
    [
        ("userId,movieId,rating\n1,2,3\n", {}, r"missing column\(s\) \['timestamp'\]"),
        ("userId,movieId,rating,timestamp\n1,2,3,4\n1,x,3,4\n", {}, r"line 3, column 'movieId'"),
        (
            TABLE,
            {"eval_negatives": 3, "min_ratings": 2},
            r"user 10 interacted with 3 of the 5 items, leaving 2 < 3",
        ),
        (TABLE, {"eval_negatives": 5, "min_ratings": 2}, r"only 5 distinct items remain"),
        (TABLE, {"min_ratings": 50}, r"no user has >= 50 ratings"),
    ],
)
@pytest.mark.parametrize(
    "engine, partitions",
    [("pandas", 1), ("pandas", 3), pytest.param("nvtabular", 1, marks=needs_nvtabular)],
)
def test_errors_write_nothing(tmp_path, content, options, message, engine, partitions):
    # In memory the input is rejected before the output's folder exists; partitioned, inside
    # its temporary folder: either way nothing is left, not even the parent folder it made.
    path = tmp_path / "in" / "ratings.csv"
    path.parent.mkdir()
    path.write_text(content)
    out = tmp_path / "outs" / "etl"
    with pytest.raises(ValueError, match=message):
        etl(path, out, engine=engine, partitions=partitions, **options)
    assert not (tmp_path / "outs").exists()


def test_cli_error_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "ratings.csv"
    bad.write_text("userId,movieId,rating,timestamp\n1,2,9,4\n")
    code = main(["etl", "--input", str(bad), "--out", str(tmp_path / "out"), "--engine", "pandas"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"ncf etl: error: {bad}, line 2, column 'rating': value 9.0" in err
    assert not (tmp_path / "out").exists()


def test_reuse_force_and_mismatch(table, tmp_path, capsys):
    out = tmp_path / "out"
    first = etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas")
    marker = out / "train" / "part_0.parquet"
    stamp = marker.stat().st_mtime_ns
    again = etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas", workers=1)
    assert "reusing" in capsys.readouterr().err
    assert again["created"] == first["created"] and marker.stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match=r"seed: 1 != 5.*--force"):
        etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas", seed=5)
    rebuilt = etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas", seed=5, force=True)
    assert rebuilt["seed"] == 5 and metadata(out)["seed"] == 5
    assert not list(tmp_path.glob(".tmp-*"))
    # The input changed: its sha256 differs, so the output is not reused.
    table.write_text(TABLE.replace("20,5,0.5,2", "20,5,1.0,2"))
    with pytest.raises(FileExistsError, match=r"input_sha256"):
        etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas", seed=5)


def test_bad_options(table, tmp_path):
    with pytest.raises(ValueError, match=r"--workers > 1 .* --engine nvtabular"):
        etl(table, tmp_path / "o", engine="pandas", workers=2)
    with pytest.raises(ValueError, match=r"--min-ratings must be >= 1"):
        etl(table, tmp_path / "o", min_ratings=0)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "name,content",
    [
        ("ratings.dat", "1::10::5::100\r\n1::20::3::200\r\n2::10::4::50\r\n2::30::1::60\r\n"),
        (
            "ratings.csv",
            "\ufeffuserId,movieId,rating,timestamp\r\n1,10,5,100\r\n1,20,3,200\r\n2,10,4,50\r\n2,30,1,60\r\n",
        ),
    ],
)
def test_ml1m_dat_and_bom_crlf_csv_end_to_end(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8"))
    meta = etl(
        path, tmp_path / "out", eval_negatives=1, min_ratings=2, engine="pandas", holdout="test"
    )
    assert meta["input"]["format"] == name.rsplit(".", 1)[1]
    data = outputs(tmp_path / "out")
    # users 1, 2 -> 0, 1; items 10, 20, 30 -> 0, 1, 2; tests: (1, 20) and (2, 30)
    assert pairs(data[TEST_DIR]) == [(0, 1), (1, 2)]
    assert pairs(data[NEGATIVES_DIR]) == [(0, 2), (1, 1)]


def test_output_holds_its_resolved_config_and_it_reruns_the_etl(table, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--input", str(table), "--out", str(out), "--engine", "pandas", "--min-ratings", "2"]
    assert main(["etl", *argv, "--eval-negatives", "2", "--holdout", "test"]) == 0
    doc = json.loads((out / CONFIG_FILE).read_text())
    assert doc["format"] == "ncf-config/1" and doc["stage"] == "etl"
    assert doc["config"]["eval_negatives"] == 2 and doc["config"]["seed"] == DEFAULT_SEED
    # The fingerprint keeps its key names (outputs written before the configs stay reusable).
    assert metadata(out)["fingerprint"]["negatives"] == 2
    capsys.readouterr()
    assert main(["etl", "--config", str(out / CONFIG_FILE)]) == 0
    assert "reusing" in capsys.readouterr().err
    # A flag over the file: another seed, refused without --force.
    assert main(["etl", "--config", str(out / CONFIG_FILE), "--seed", "5"]) == 2
    assert "seed: 1 != 5" in capsys.readouterr().err


def test_etl_seed_default_is_the_one_seed_default():
    from ncf.workflows.etl import EtlConfig

    assert EtlConfig().seed == DEFAULT_SEED == 1


def test_force_never_replaces_a_folder_the_etl_did_not_write(table, tmp_path, capsys):
    """Issue 17: `cp ratings.csv D/; ncf etl --input D/ratings.csv --out D --force` kept D."""
    folder = tmp_path / "D"
    folder.mkdir()
    (folder / "ratings.csv").write_text(TABLE)
    (folder / "notes.txt").write_text("mine")
    base = ["etl", "--engine", "pandas", "--min-ratings", "2", "--eval-negatives", "2"]
    for args, message in [
        (["--input", str(folder / "ratings.csv"), "--out", str(folder)], "lies inside"),
        (["--input", str(table), "--out", str(folder)], "not written by this project"),
    ]:
        for force in ([], ["--force"]):
            assert main([*base, *args, *force]) == 2
            err = capsys.readouterr().err
            assert message in err and "pass --force" not in err, err
            assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "ratings.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["D", "ratings.csv"]  # no temp left
    empty = tmp_path / "E"
    empty.mkdir()  # an empty folder holds nothing to lose: written into
    assert main([*base, "--input", str(table), "--out", str(empty)]) == 0
    assert metadata(empty)["format"] == "ncf-etl/1"


def test_force_replaces_an_etl_output_written_before_the_marker(table, tmp_path):
    out = tmp_path / "out"
    etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas")
    (out / ".ncf-output.json").unlink()  # as written before markers existed: metadata.json only
    meta = json.loads((out / "metadata.json").read_text())
    del meta["format"]
    (out / "metadata.json").write_text(json.dumps(meta))
    rebuilt = etl(table, out, eval_negatives=2, min_ratings=2, engine="pandas", seed=5, force=True)
    assert rebuilt["seed"] == 5 and (out / ".ncf-output.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "ratings.csv"]
