"""``ncf etl --cold-users``: a seeded share of the users set apart with every rating, the same
users in memory and partition by partition; none of their ratings reaches the model's data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from ncf.core.names import COLD_USERS_DIR, RAW_ITEM, RAW_TIME, RAW_USER
from ncf.workflows.partition import cold_user_rows
from tests.workflows.helpers import SMALL, etl, needs_nvtabular


def test_the_draw_is_per_user_seeded_and_about_the_share():
    users = np.repeat(np.arange(20_000, dtype=np.int32), 2)  # two rows per user
    rows = cold_user_rows(users, 0.1, seed=5)
    assert np.array_equal(rows[0::2], rows[1::2])  # a user's rows go together
    assert 0.09 < rows[0::2].mean() < 0.11
    perm = np.random.default_rng(0).permutation(users.size)
    assert np.array_equal(cold_user_rows(users[perm], 0.1, seed=5), rows[perm])  # order-free
    assert not np.array_equal(cold_user_rows(users, 0.1, seed=6), rows)
    assert not cold_user_rows(users, 0.0, seed=5).any()


@pytest.mark.parametrize(
    "engine,partitions",
    [("pandas", 0), pytest.param("nvtabular", 3, marks=needs_nvtabular)],
)
def test_cold_users_leave_the_model_data_and_keep_their_ratings(tmp_path, engine, partitions):
    ratings = pd.read_csv(SMALL)
    meta = etl(SMALL, tmp_path / "out", engine=engine, partitions=partitions, cold_users=0.1)
    cold = pq.read_table(tmp_path / "out" / COLD_USERS_DIR).to_pandas()
    assert list(cold.columns) == [RAW_USER, RAW_ITEM, RAW_TIME]
    users = cold[RAW_USER].unique()
    assert meta["cold_users"]["users"] == users.size and 40 < users.size < 85  # of 610
    # Every rating of those users (no duplicate pairs in this file), by user then time.
    mine = ratings[ratings[RAW_USER].isin(users)]
    assert meta["cold_users"]["ratings"] == len(cold) == len(mine)
    cold = cold.sort_values([RAW_USER, RAW_TIME, RAW_ITEM], kind="stable").reset_index(drop=True)
    want = mine.sort_values([RAW_USER, RAW_TIME, RAW_ITEM], kind="stable")[list(cold.columns)]
    pd.testing.assert_frame_equal(cold, want.reset_index(drop=True), check_dtype=False)
    # The rest: the users the ETL kept are exactly the others.
    assert meta["n_users"] == ratings[RAW_USER].nunique() - users.size
    assert meta["fingerprint"]["cold_users"] == 0.1


def test_the_same_users_in_memory_and_in_partitions(tmp_path):
    etl(SMALL, tmp_path / "one", engine="pandas", cold_users=0.2, seed=3)
    etl(SMALL, tmp_path / "three", engine="pandas", cold_users=0.2, seed=3, partitions=3)
    one = pq.read_table(tmp_path / "one" / COLD_USERS_DIR).to_pandas()
    three = pq.read_table(tmp_path / "three" / COLD_USERS_DIR).to_pandas()
    key = [RAW_USER, RAW_TIME, RAW_ITEM]
    pd.testing.assert_frame_equal(
        one.sort_values(key).reset_index(drop=True), three.sort_values(key).reset_index(drop=True)
    )


def test_a_share_outside_zero_to_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--cold-users 1.0: a share of the users in"):
        etl(SMALL, tmp_path / "out", engine="pandas", cold_users=1.0)
