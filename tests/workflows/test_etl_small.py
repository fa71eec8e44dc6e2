"""End to end on all of ml-latest-small (100,836 ratings): split, negatives, counts, workflow.

Default options: ``--holdout valid,test --ties item-id``.
"""

from __future__ import annotations

import pandas as pd
import pytest

from ncf.core.names import (
    ITEM,
    NEGATIVES_DIR,
    RAW_ITEM,
    RAW_USER,
    TEST_DIR,
    TRAIN_DIR,
    USER,
    VALID_DIR,
    VALID_NEGATIVES_DIR,
    WORKFLOW_DIR,
)
from tests.workflows.helpers import SMALL, etl, metadata, needs_nvtabular, read

SPLITS = (TRAIN_DIR, VALID_DIR, TEST_DIR, NEGATIVES_DIR, VALID_NEGATIVES_DIR)

N_NEG = 100
pytestmark = needs_nvtabular


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """One NVTabular-engine ETL run of ml-latest-small, shared by the tests of this module."""
    out = tmp_path_factory.mktemp("etl") / "small"
    etl(SMALL, out, eval_negatives=N_NEG, min_ratings=20, seed=3)
    return out, {n: read(out, n) for n in SPLITS}, metadata(out)


@pytest.fixture(scope="module")
def raw():
    return pd.read_csv(SMALL)


@pytest.fixture(scope="module")
def workflow(small):
    from ncf.workflows.workflow import import_nvtabular, quiet_merlin

    nvt = import_nvtabular()
    with quiet_merlin():
        return nvt.Workflow.load(str(small[0] / WORKFLOW_DIR))


def encode(workflow, frame: pd.DataFrame) -> pd.DataFrame:
    """Raw ids -> model ids with the saved Workflow, as serving would."""
    from ncf.workflows.workflow import quiet_merlin

    with quiet_merlin():
        out = workflow.transform(frame[[RAW_USER, RAW_ITEM]].astype("int64").reset_index(drop=True))
    return out[[USER, ITEM]]


def test_counts_match_metadata(small, raw):
    _, data, meta = small
    assert meta["input"]["rows"] == len(raw) == 100_836
    assert meta["train_rows"] == len(data[TRAIN_DIR])
    assert meta["test_rows"] == len(data[TEST_DIR]) == meta["n_users"] == raw[RAW_USER].nunique()
    assert meta["valid_rows"] == len(data[VALID_DIR]) == meta["n_users"]
    assert meta["negative_rows"] == len(data[NEGATIVES_DIR]) == N_NEG * meta["n_users"]
    assert meta["valid_negative_rows"] == len(data[VALID_NEGATIVES_DIR]) == meta["negative_rows"]
    assert meta["n_items"] == raw[RAW_ITEM].nunique()
    held = meta["valid_rows"] + meta["test_rows"]
    assert meta["train_rows"] + held == len(raw) - sum(meta["dropped"].values())
    assert meta["negatives_per_user"] == N_NEG and meta["seed"] == 3
    # Categorify reserves ids 0..2; real ids fill [lo, hi) and the embedding tables cover them.
    assert (
        meta["user_id_range"] == [3, 3 + meta["n_users"]]
        and meta["num_users"] == 3 + meta["n_users"]
    )
    assert (
        meta["item_id_range"] == [3, 3 + meta["n_items"]]
        and meta["num_items"] == 3 + meta["n_items"]
    )
    for name, (lo, hi) in ((USER, meta["user_id_range"]), (ITEM, meta["item_id_range"])):
        for frame in data.values():
            assert frame[name].between(lo, hi - 1).all()


@pytest.mark.parametrize("folder", [NEGATIVES_DIR, VALID_NEGATIVES_DIR])
def test_no_negative_is_a_positive_and_all_are_distinct(small, folder):
    _, data, _ = small
    positives = pd.concat([data[TRAIN_DIR], data[VALID_DIR], data[TEST_DIR]])
    neg = data[folder]
    assert neg.merge(positives, on=[USER, ITEM]).empty  # so neither split's held-out item
    assert not neg.duplicated().any()
    assert (neg.groupby(USER).size() == N_NEG).all()
    assert neg[USER].is_monotonic_increasing


def test_split_is_each_users_latest_rating(small, raw, workflow):
    _, data, _ = small
    # Independent reference: sort by (user, timestamp, movieId); the last row of each user is
    # test, the one before it valid.
    ordered = raw.sort_values([RAW_USER, "timestamp", RAW_ITEM]).groupby(RAW_USER)
    for name, rows in ((TEST_DIR, ordered.nth(-1)), (VALID_DIR, ordered.nth(-2))):
        rows = rows.reset_index() if RAW_USER not in rows.columns else rows
        expected = encode(workflow, rows).sort_values(USER).reset_index(drop=True)
        pd.testing.assert_frame_equal(data[name].reset_index(drop=True), expected)
    # Train is everything else: the three splits together are exactly all ratings.
    both = (
        pd.concat([data[TRAIN_DIR], data[VALID_DIR], data[TEST_DIR]])
        .sort_values([USER, ITEM])
        .reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(
        both, encode(workflow, raw).sort_values([USER, ITEM]).reset_index(drop=True)
    )


def test_vocab_files_give_the_workflow_mapping(small, raw, workflow):
    out, _, meta = small
    codes = encode(workflow, raw)
    for kind, model_col in (("user", USER), ("item", ITEM)):
        vocab = pd.read_parquet(out / meta["vocab"][kind])
        raw_col = meta["vocab_columns"][kind]
        assert list(vocab.index) == list(
            range(meta["vocab_first_id"][kind], meta[f"{kind}_id_range"][1])
        )
        mapping = pd.Series(vocab.index, index=vocab[raw_col].values)
        pd.testing.assert_series_equal(
            mapping.loc[raw[raw_col].values].reset_index(drop=True),
            codes[model_col].astype("int64"),
            check_names=False,
        )


def test_same_input_same_output(small, tmp_path):
    out, data, _ = small
    etl(SMALL, tmp_path / "again", eval_negatives=N_NEG, min_ratings=20, seed=3)
    again = {n: read(tmp_path / "again", n) for n in SPLITS}
    for name, frame in data.items():
        pd.testing.assert_frame_equal(again[name], frame)


def test_pandas_engine_gives_the_same_split(small, raw, workflow, tmp_path):
    _, data, _ = small
    out = tmp_path / "pandas"
    meta = etl(SMALL, out, eval_negatives=N_NEG, min_ratings=20, seed=3, engine="pandas")
    assert meta["engine"] == "pandas" and not (out / WORKFLOW_DIR).exists()
    assert meta["user_id_range"] == [0, meta["n_users"]] and meta["num_users"] == meta["n_users"]
    # Map both outputs back to raw ids: the same test pairs.
    users = pd.read_parquet(out / meta["vocab"]["user"])[RAW_USER]
    items = pd.read_parquet(out / meta["vocab"]["item"])[RAW_ITEM]
    test = read(out, TEST_DIR)
    pandas_raw = sorted(
        zip(users.loc[test[USER]].values, items.loc[test[ITEM]].values, strict=True)
    )
    latest = raw.sort_values([RAW_USER, "timestamp", RAW_ITEM]).groupby(RAW_USER).tail(1)
    assert pandas_raw == sorted(zip(latest[RAW_USER], latest[RAW_ITEM], strict=True))
    assert users.is_monotonic_increasing and items.is_monotonic_increasing  # sorted-unique ids
