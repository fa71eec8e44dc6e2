"""``--holdout {valid,test | test}`` and ``--ties {item-id | file-order}`` on hand-computed tables.

Checks: the exact train/valid/test rows of each rule, disjointness, negatives that avoid every
positive of their user (so also the other split's held-out item), the minimum-interactions rule,
the fingerprint, and that ``--holdout test`` reproduces the outputs of the code before the option.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ncf.core.names import (
    ITEM,
    NEGATIVES_DIR,
    TEST_DIR,
    TRAIN_DIR,
    USER,
    VALID_DIR,
    VALID_NEGATIVES_DIR,
)
from ncf.workflows.split import hold_out_latest
from tests.workflows.helpers import SMALL, etl, needs_nvtabular, read

# Lines of different users interleave, so "file order" is the order of the whole file.
# user 1: 10@100, 30@300, 20@300, 25@300, 40@200, 60@50 (three-way tie at 300: lines 30, 20, 25)
# user 2: 20@500, 10@500 (tie, 20 on the earlier line), 70@400
# user 3: 10@1, 20@2 (two interactions: too few for valid,test)
# user 4: 60@10, 70@20, 60@30 (duplicate pair: the t=30 line is kept), 50@5
TABLE = """userId,movieId,rating,timestamp
1,10,4.0,100
2,20,3.0,500
1,30,4.0,300
4,60,1.0,10
1,20,4.0,300
3,10,2.0,1
2,10,3.0,500
1,25,4.0,300
4,70,2.0,20
1,40,4.0,200
2,70,5.0,400
4,60,4.5,30
3,20,2.0,2
1,60,4.0,50
4,50,3.0,5
"""

# Hand-computed (raw userId, raw movieId) of each split.
EXPECTED = {
    ("valid,test", "item-id"): {
        TEST_DIR: [(1, 30), (2, 20), (4, 60)],
        VALID_DIR: [(1, 25), (2, 10), (4, 70)],
        TRAIN_DIR: [(1, 10), (1, 20), (1, 40), (1, 60), (2, 70), (4, 50)],
    },
    ("valid,test", "file-order"): {
        TEST_DIR: [(1, 25), (2, 10), (4, 60)],
        VALID_DIR: [(1, 20), (2, 20), (4, 70)],
        TRAIN_DIR: [(1, 10), (1, 30), (1, 40), (1, 60), (2, 70), (4, 50)],
    },
    ("test", "item-id"): {
        TEST_DIR: [(1, 30), (2, 20), (3, 20), (4, 60)],
        TRAIN_DIR: [(1, 10), (1, 20), (1, 25), (1, 40), (1, 60), (2, 10), (2, 70), (3, 10)]
        + [(4, 50), (4, 70)],
    },
    ("test", "file-order"): {
        TEST_DIR: [(1, 25), (2, 10), (3, 20), (4, 60)],
        TRAIN_DIR: [(1, 10), (1, 20), (1, 30), (1, 40), (1, 60), (2, 20), (2, 70), (3, 10)]
        + [(4, 50), (4, 70)],
    },
}
ALL_ITEMS = {10, 20, 25, 30, 40, 50, 60, 70}


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text(TABLE)
    return path


def raw_pairs(out, meta: dict, name: str) -> list[tuple[int, int]]:
    """One dataset of ``out`` as sorted (raw userId, raw movieId) pairs, through the vocab files."""
    frame = read(out, name)
    maps = {}
    for kind, col in (("user", USER), ("item", ITEM)):
        vocab = pd.read_parquet(out / meta["vocab"][kind])
        maps[col] = pd.Series(vocab[meta["vocab_columns"][kind]].values, index=vocab.index)
    users = maps[USER].loc[frame[USER]].tolist()
    items = maps[ITEM].loc[frame[ITEM]].tolist()
    return sorted(zip(users, items, strict=True))


def by_user(pairs: list[tuple[int, int]]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for u, i in pairs:
        out.setdefault(u, set()).add(i)
    return out


@pytest.mark.parametrize("engine", ["pandas", pytest.param("nvtabular", marks=needs_nvtabular)])
@pytest.mark.parametrize("holdout,ties", list(EXPECTED))
def test_hand_computed_splits(table, tmp_path, holdout, ties, engine):
    out = tmp_path / "out"
    meta = etl(
        table, out, eval_negatives=2, min_ratings=1, holdout=holdout, ties=ties, engine=engine
    )
    splits = EXPECTED[(holdout, ties)]
    for name, pairs in splits.items():
        assert raw_pairs(out, meta, name) == sorted(pairs), name
    assert (out / VALID_DIR).exists() == (holdout == "valid,test")
    assert (out / VALID_NEGATIVES_DIR).exists() == (holdout == "valid,test")
    # Disjoint, and together every de-duplicated interaction of the kept users.
    rows = [p for pairs in splits.values() for p in pairs]
    assert (
        len(rows)
        == len(set(rows))
        == meta["train_rows"] + meta["test_rows"] + meta.get("valid_rows", 0)
    )
    assert (meta["holdout"], meta["ties"]) == (holdout, ties)
    assert meta["fingerprint"]["holdout"] == holdout and meta["fingerprint"]["ties"] == ties
    valid = holdout == "valid,test"
    assert meta["holdout_min_interactions"] == (3 if valid else 1)
    assert meta["dropped"] == {
        "duplicate_pairs": 1,
        "users_below_min_ratings": 0,
        "users_below_holdout_minimum": 2 if valid else 0,  # user 3's two rows
    }
    assert meta["dropped_users"] == {"below_min_ratings": 0, "below_holdout_minimum": int(valid)}
    _check_negatives(
        out, meta, [n for n in (NEGATIVES_DIR, VALID_NEGATIVES_DIR) if (out / n).exists()]
    )


def _check_negatives(out, meta: dict, folders: list[str]) -> None:
    positives = by_user(
        [p for name in (TRAIN_DIR, VALID_DIR, TEST_DIR) if (out / name).exists()
         for p in raw_pairs(out, meta, name)]
    )  # fmt: skip
    for folder in folders:
        negs = raw_pairs(out, meta, folder)
        got = by_user(negs)
        assert set(got) == set(positives) and len(negs) == 2 * len(positives)
        for user, items in got.items():
            assert len(items) == 2 and not items & positives[user], (folder, user)
        # user 1 rated 6 of the 8 items: its negatives are exactly the other two, in every split.
        assert got[1] == ALL_ITEMS - positives[1] == {50, 70}


def test_negatives_avoid_the_other_splits_item(tmp_path):
    """Many users with few free items: valid negatives never hold the test item and vice versa."""
    rng = np.random.default_rng(5)
    n_users, n_items, per_user = 60, 12, 8
    users = np.repeat(np.arange(1, n_users + 1), per_user)
    items = np.concatenate(
        [rng.choice(n_items, per_user, replace=False) + 1 for _ in range(n_users)]
    )
    times = rng.integers(0, 4, users.size)  # many ties on timestamp
    path = tmp_path / "ratings.csv"
    pd.DataFrame({"userId": users, "movieId": items, "rating": 3.0, "timestamp": times}).to_csv(
        path, index=False
    )
    out = tmp_path / "out"
    etl(path, out, eval_negatives=4, min_ratings=1, engine="pandas")
    frames = {n: read(out, n) for n in (TRAIN_DIR, VALID_DIR, TEST_DIR)}
    keys = {n: set(zip(f[USER], f[ITEM], strict=True)) for n, f in frames.items()}
    assert not (keys[TRAIN_DIR] & keys[VALID_DIR] or keys[TRAIN_DIR] & keys[TEST_DIR])
    assert not keys[VALID_DIR] & keys[TEST_DIR]
    positives = keys[TRAIN_DIR] | keys[VALID_DIR] | keys[TEST_DIR]
    assert len(positives) == n_users * per_user
    for folder in (NEGATIVES_DIR, VALID_NEGATIVES_DIR):
        negs = read(out, folder)
        assert not set(zip(negs[USER], negs[ITEM], strict=True)) & positives
        assert (negs.groupby(USER).size() == 4).all() and not negs.duplicated().any()
    # The two draws are independent streams: not the same negatives.
    assert not read(out, NEGATIVES_DIR).equals(read(out, VALID_NEGATIVES_DIR))


def test_hold_out_latest_masks():
    # rows:         0  1  2  3  4  5  6
    user = np.array([0, 1, 0, 0, 1, 1, 0])
    time = np.array([5, 2, 9, 9, 7, 2, 1])
    tie = np.array([3, 8, 4, 6, 1, 9, 0])
    # user 0: 9@rows 2,3 tie -> larger tie value 6 (row 3) is test, row 2 valid;
    # user 1: latest 7 (row 4) test; rows 1, 5 tie at 2 -> tie value 9 (row 5) valid.
    test, valid = hold_out_latest(user, tie, time, 2, 2)
    assert np.flatnonzero(test).tolist() == [3, 4]
    assert np.flatnonzero(valid).tolist() == [2, 5]
    (only,) = hold_out_latest(user, tie, time, 2, 1)
    np.testing.assert_array_equal(only, test)
    with pytest.raises(RuntimeError, match="fewer rows than held-out splits"):
        hold_out_latest(np.array([0, 1, 1]), np.array([1, 2, 3]), np.array([4, 5, 6]), 2, 2)


def test_too_few_interactions_for_valid_test(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("userId,movieId,rating,timestamp\n1,10,4,1\n1,20,4,2\n2,10,4,1\n2,30,4,5\n")
    with pytest.raises(
        ValueError, match=r"no user has >= 3 ratings.*needs 3 per user.*--holdout test"
    ):
        etl(path, tmp_path / "out", eval_negatives=1, min_ratings=2, engine="pandas")
    assert not (tmp_path / "out").exists()
    meta = etl(
        path, tmp_path / "out", eval_negatives=1, min_ratings=2, engine="pandas", holdout="test"
    )
    assert meta["test_rows"] == meta["train_rows"] == 2


def test_holdout_and_ties_are_in_the_fingerprint(table, tmp_path):
    out = tmp_path / "out"
    etl(table, out, eval_negatives=2, min_ratings=1, engine="pandas", holdout="test")
    with pytest.raises(FileExistsError, match=r"holdout: 'test' != 'valid,test'"):
        etl(table, out, eval_negatives=2, min_ratings=1, engine="pandas")
    with pytest.raises(FileExistsError, match=r"ties: 'item-id' != 'file-order'"):
        etl(
            table,
            out,
            eval_negatives=2,
            min_ratings=1,
            engine="pandas",
            holdout="test",
            ties="file-order",
        )
    with pytest.raises(ValueError, match=r"--holdout must be one of"):
        etl(table, tmp_path / "o2", holdout="valid")


def test_output_written_before_the_options_is_reused_as_holdout_test(table, tmp_path, capsys):
    """Its fingerprint has no holdout/ties keys: it was made with --holdout test --ties item-id."""
    import json

    out = tmp_path / "out"
    etl(table, out, eval_negatives=2, min_ratings=1, engine="pandas", holdout="test")
    meta_path = out / "metadata.json"
    meta = json.loads(meta_path.read_text())
    for key in ("holdout", "ties"):
        del meta["fingerprint"][key]
    meta_path.write_text(json.dumps(meta))
    etl(table, out, eval_negatives=2, min_ratings=1, engine="pandas", holdout="test")
    assert "reusing" in capsys.readouterr().err
    with pytest.raises(FileExistsError, match="holdout"):
        etl(table, out, eval_negatives=2, min_ratings=1, engine="pandas")


def _digest(out, name: str) -> str:
    table = pq.read_table(out / name)
    h = hashlib.sha256()
    for col in (USER, ITEM):
        h.update(np.ascontiguousarray(table.column(col).to_numpy().astype("<i8")).tobytes())
    return h.hexdigest()


# sha256 of the int64 user_id then item_id columns of `ncf etl --input
# data/ml-latest-small/ratings.csv --seed 3 --holdout test`, one set per engine, the same on both
# test lanes. The pandas engine's train/ and test/ are still exactly what the code before --holdout
# wrote (commit 17d9b41); every negatives/ changed with the per-user draw, and the nvtabular
# engine's train/ with its rows sorted by user_id (Categorify's frequency order), then all of
# its files when equally frequent ids came to be ordered by raw id (the same on every host).
PINNED = {
    "pandas": {
        TRAIN_DIR: "a9327c6298ed4e356c6353715a729be06c120f1670b40003950eb10703d9b505",
        TEST_DIR: "07abfa8a32045482a2f9c4a73c689448705254e97216d6e664fa19b7f03ac456",
        NEGATIVES_DIR: "a7d6bece7439c95d5a7fb3347c9d8eea76b3f9ee46a4525ae0e4d29f8b6c8d55",
    },
    "nvtabular": {
        TRAIN_DIR: "cc982898ec01c058804a721aaa12017c7ac462d72e24aa06cefecb828083677b",
        TEST_DIR: "7ec412a14c4a2136e2317b9a8bb31050e889b3cd9b563755c34eb5eb1cea472c",
        NEGATIVES_DIR: "7c5eecda9d2417b3c8fb732d996b94e02903f8ccf241f0f429a35a8174808800",
    },
}


@pytest.mark.parametrize("engine", ["pandas", pytest.param("nvtabular", marks=needs_nvtabular)])
def test_holdout_test_output_is_pinned_and_valid_test_shares_it(tmp_path, engine):
    out = tmp_path / "test"
    etl(SMALL, out, seed=3, engine=engine, holdout="test")
    before = {n: _digest(out, n) for n in (TRAIN_DIR, TEST_DIR, NEGATIVES_DIR)}
    assert before == PINNED[engine]
    assert not (out / VALID_DIR).exists()
    # valid,test: the same test/ rows and test negatives (same seed, same users), one train row
    # per user less, and a valid/ split.
    both = tmp_path / "both"
    meta = etl(SMALL, both, seed=3, engine=engine)
    assert _digest(both, TEST_DIR) == before[TEST_DIR]
    assert _digest(both, NEGATIVES_DIR) == before[NEGATIVES_DIR]
    assert meta["valid_rows"] == meta["test_rows"] == 610 and meta["train_rows"] == 100_836 - 1220
