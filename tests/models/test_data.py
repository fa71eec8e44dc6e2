"""Reading an ETL directory: tensors as documented, and clear errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from ncf.core import names
from ncf.models.data import load_etl
from ncf.workflows.etl import EtlConfig, run_etl
from tests.models.etl_data import RESERVED, planted_ratings, write_etl_dir


@pytest.fixture()
def small_etl(tmp_path: Path) -> Path:
    return write_etl_dir(
        planted_ratings(n_users=10, n_items=30, per_user=6), tmp_path / "etl", negatives=5
    )


def test_loads_aligned_int32_tensors(small_etl: Path):
    data = load_etl(small_etl)
    assert data.num_users == 10 + RESERVED and data.item_range == (RESERVED, 30 + RESERVED)
    assert data.train_users.dtype == torch.int32 and data.train_users.numel() == 10 * 5
    assert torch.equal(data.test_users, torch.arange(RESERVED, 10 + RESERVED, dtype=torch.int32))
    assert data.eval_negatives.shape == (10, 5)
    raw = pd.read_parquet(small_etl / names.NEGATIVES_DIR)
    user5 = raw[raw[names.USER] == RESERVED + 5][names.ITEM].tolist()
    assert data.eval_negatives[5].tolist() == user5  # each user's row keeps the draw order
    assert len(data.metadata_sha256) == 64


def _rewrite(etl: Path, sub: str, edit) -> None:
    path = etl / sub / "part_0.parquet"
    frame = pd.read_parquet(path)
    edit(frame).to_parquet(path, index=False)


def test_item_outside_range_names_file_row_and_value(small_etl: Path):
    def bad(f: pd.DataFrame) -> pd.DataFrame:
        f.loc[4, names.ITEM] = 999
        return f

    _rewrite(small_etl, names.TRAIN_DIR, bad)
    with pytest.raises(ValueError, match=r"train: row 4 item_id=999 is outside \[3, 33\)"):
        load_etl(small_etl)


def test_missing_column(small_etl: Path):
    _rewrite(small_etl, names.TEST_DIR, lambda f: f.rename(columns={names.ITEM: "movieId"}))
    with pytest.raises(ValueError, match="no column 'item_id'"):
        load_etl(small_etl)


def test_negative_count_mismatch(small_etl: Path):
    _rewrite(small_etl, names.NEGATIVES_DIR, lambda f: f.iloc[1:])
    with pytest.raises(ValueError, match="49 rows, expected 10 test users x negatives_per_user=5"):
        load_etl(small_etl)


def test_test_item_among_negatives(small_etl: Path):
    test = pd.read_parquet(small_etl / names.TEST_DIR)

    def clash(f: pd.DataFrame) -> pd.DataFrame:
        first = f.index[f[names.USER] == test[names.USER].iloc[2]][0]
        f.loc[first, names.ITEM] = test[names.ITEM].iloc[2]
        return f

    _rewrite(small_etl, names.NEGATIVES_DIR, clash)
    with pytest.raises(ValueError, match="has its test item"):
        load_etl(small_etl)


def test_missing_metadata_and_keys(small_etl: Path, tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="run `ncf etl"):
        load_etl(tmp_path / "nowhere")
    meta_path = small_etl / names.METADATA_FILE
    meta = json.loads(meta_path.read_text())
    del meta["item_id_range"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="missing keys \\['item_id_range'\\]"):
        load_etl(small_etl)


def test_empty_folder(small_etl: Path):
    shutil.rmtree(small_etl / names.TEST_DIR)
    (small_etl / names.TEST_DIR).mkdir()
    with pytest.raises(FileNotFoundError, match="no parquet files"):
        load_etl(small_etl)


@pytest.fixture()
def valid_etl(tmp_path: Path) -> Path:
    """The real `ncf etl --holdout valid,test` (pandas engine) of 10 planted users."""
    frame = planted_ratings(n_users=10, n_items=30, per_user=6)
    csv = tmp_path / "ratings.csv"
    pd.DataFrame(
        {"userId": frame.user, "movieId": frame.item, "rating": 4.0, "timestamp": frame.time}
    ).to_csv(csv, index=False)
    opts = EtlConfig(
        input=csv, out=tmp_path / "etl", eval_negatives=5, min_ratings=1, engine="pandas"
    )
    run_etl(opts)
    return tmp_path / "etl"


def test_loads_the_valid_split(valid_etl: Path):
    data = load_etl(valid_etl)
    assert data.has_valid and data.train_users.numel() == 10 * 4
    assert torch.equal(data.valid_users, data.test_users)
    assert data.valid_negatives.shape == data.eval_negatives.shape == (10, 5)
    assert not (data.valid_items == data.test_items).any()
    raw = pd.read_parquet(valid_etl / names.VALID_NEGATIVES_DIR)
    assert data.valid_negatives[3].tolist() == raw[raw[names.USER] == 3][names.ITEM].tolist()
    view = data.held_out("valid")  # what validation evaluates: no test tensor reachable
    assert view.test_items is data.valid_items and view.eval_negatives is data.valid_negatives
    assert not view.has_valid and data.held_out("test") is data


def test_without_valid_split(small_etl: Path):
    data = load_etl(small_etl)  # an ETL directory without valid/, as --holdout test writes
    assert not data.has_valid and data.valid_items is None
    with pytest.raises(ValueError, match="no 'valid' split"):
        data.held_out("valid")


def test_missing_valid_split(valid_etl: Path):
    shutil.rmtree(valid_etl / names.VALID_DIR)
    with pytest.raises(
        ValueError, match="valid: missing, but metadata.json says holdout 'valid,test'"
    ):
        load_etl(valid_etl)


@pytest.mark.parametrize("which", ["test item in valid negatives", "valid item in test negatives"])
def test_held_out_item_among_the_other_splits_negatives(valid_etl: Path, which: str):
    test = pd.read_parquet(valid_etl / names.TEST_DIR)
    valid = pd.read_parquet(valid_etl / names.VALID_DIR)
    item, folder = (
        (test, names.VALID_NEGATIVES_DIR)
        if which.startswith("test")
        else (valid, names.NEGATIVES_DIR)
    )

    def plant(f: pd.DataFrame) -> pd.DataFrame:
        first = f.index[f[names.USER] == item[names.USER].iloc[4]][0]
        f.loc[first, names.ITEM] = item[names.ITEM].iloc[4]
        return f

    _rewrite(valid_etl, folder, plant)
    with pytest.raises(ValueError, match=r"user 4 has its valid item .* among the other split's"):
        load_etl(valid_etl)
