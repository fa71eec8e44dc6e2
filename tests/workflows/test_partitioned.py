"""The partitioned ETL writes what the in-memory one writes, for any partitioning.

Each dataset is read as training reads it (``ncf.models.data.read_pairs``: the partition files
in natural order, stably sorted by user), so "the same output" means the same rows in the same
order: every user's rows, and its negatives in draw order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncf.core.names import NEGATIVES_DIR, TEST_DIR, TRAIN_DIR, VALID_DIR, VALID_NEGATIVES_DIR
from ncf.models.data import read_pairs
from tests.workflows.helpers import SMALL, etl, needs_nvtabular

DATASETS = (TRAIN_DIR, TEST_DIR, NEGATIVES_DIR, VALID_DIR, VALID_NEGATIVES_DIR)
# metadata.json keys that describe how a run was spread or timed, not what it wrote
RUN_KEYS = {"created", "timings_s", "partitions", "workers", "scheduler"}


def rows(out) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {name: read_pairs(out / name) for name in DATASETS if (out / name).exists()}


def assert_same_output(a, b) -> None:
    ra, rb = rows(a), rows(b)
    assert ra.keys() == rb.keys()
    for name, (user, item) in ra.items():
        np.testing.assert_array_equal(rb[name][0], user, err_msg=name)
        np.testing.assert_array_equal(rb[name][1], item, err_msg=name)
    meta_a, meta_b = (pd.read_json(d / "metadata.json", typ="series") for d in (a, b))
    for key in set(meta_a.index) - RUN_KEYS - {"input"}:
        assert meta_a[key] == meta_b[key], key


def messy_ratings(path, seed: int = 0):
    """Ratings with what the per-user steps must handle: duplicate pairs (an earlier and a later
    rating), same-second ties, users below the minimum, and a shuffled file order."""
    rng = np.random.default_rng(seed)
    n = 6000
    frame = pd.DataFrame(
        {
            "userId": rng.zipf(1.3, n) % 400 + 1,
            "movieId": rng.integers(1, 3000, n) * 7,
            "rating": 4.0,
            "timestamp": rng.integers(0, 40, n),  # many same-second ties
        }
    )
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("holdout, ties", [("valid,test", "file-order"), ("test", "item-id")])
def test_any_number_of_partitions_gives_the_in_memory_output(tmp_path, holdout, ties):
    data = messy_ratings(tmp_path / "ratings.csv")
    options = {"engine": "pandas", "holdout": holdout, "ties": ties, "min_ratings": 5}
    one = tmp_path / "p1"
    meta = etl(data, one, partitions=1, **options)
    assert meta["dropped"]["duplicate_pairs"] > 0 and meta["dropped"]["users_below_min_ratings"] > 0
    for partitions in (3, 8):
        out = tmp_path / f"p{partitions}"
        assert etl(data, out, partitions=partitions, **options)["partitions"] == partitions
        assert sorted(p.name for p in (out / TRAIN_DIR).glob("*.parquet")) == [
            f"part_{p}.parquet" for p in sorted(range(partitions), key=str)
        ]
        assert_same_output(one, out)


@needs_nvtabular
def test_partitions_on_the_nvtabular_workflow(tmp_path):
    # Categorify fitted on the partitions' files gives the ids of the fit on one frame.
    one = tmp_path / "p1"
    etl(SMALL, one, partitions=1)
    for partitions in (3, 8):
        out = tmp_path / f"p{partitions}"
        etl(SMALL, out, partitions=partitions)
        assert_same_output(one, out)
        for vocab in ("unique.userId.parquet", "unique.movieId.parquet"):
            path = f"workflow/categories/{vocab}"
            pd.testing.assert_frame_equal(pd.read_parquet(out / path), pd.read_parquet(one / path))


def test_partition_rows_chooses_the_path_and_says_so(tmp_path, capsys):
    data = messy_ratings(tmp_path / "ratings.csv")
    meta = etl(data, tmp_path / "auto", engine="pandas", min_ratings=5, partition_rows=2500)
    assert meta["partitions"] == 3  # 6,000 ratings (estimated from the file's first lines)
    assert "partitioned by user: ~6,0" in capsys.readouterr().err
    meta = etl(data, tmp_path / "mem", engine="pandas", min_ratings=5)
    assert meta["partitions"] == 1
    assert "in memory: ~6,0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("users", "grouped"),
    [
        ([3, 3, 1, 1, 1, 2], True),  # one run per user: runs moved whole
        ([5, 0, 0, 9, 2, 2, 2], True),
        ([2] * 40 + [0] * 33 + [1] * 50, True),  # long runs: moved by slices
        ([3, 3, 1, 3], False),  # user 3 in two runs: a real sort
        ([1, 2, 1], False),
    ],
)
def test_rows_sorted_by_user_keep_their_order_within_a_user(users, grouped):
    from ncf.workflows.backend import stable_argsort
    from ncf.workflows.partition import _grouped_sort

    u = np.asarray(users, dtype=np.int32)
    i = np.arange(u.size, dtype=np.int32) * 7  # distinct values: the row each comes from
    got = _grouped_sort(u, i)
    assert (got is not None) == grouped
    if grouped:
        order = stable_argsort(u)
        np.testing.assert_array_equal(got[0], u[order])
        np.testing.assert_array_equal(got[1], i[order])
