"""The pure ETL functions on cupy arrays (a cuDF frame's columns) agree with numpy (CUDA only)."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.workflows.backend import dense_codes, group_max, member, repeat
from ncf.workflows.encoding import lookup
from ncf.workflows.negatives import sample_negatives
from ncf.workflows.split import hold_out_latest, latest_of_duplicates, leave_one_out, min_count_mask

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.cuda
try:
    HAS_GPU = cupy.cuda.runtime.getDeviceCount() > 0
except cupy.cuda.runtime.CUDARuntimeError:
    HAS_GPU = False
if not HAS_GPU:
    pytest.skip("no CUDA device", allow_module_level=True)


def ratings(seed: int, n: int = 200_000):
    """Random ratings with duplicates and timestamp ties."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 3000, n)
    item = rng.integers(0, 5000, n) * 7
    time = rng.integers(0, 50, n)  # few distinct times: many ties
    return user, item, time


def test_split_functions_match_numpy():
    user, item, time = ratings(0)
    keep = latest_of_duplicates(user, item, time)
    keep_gpu = latest_of_duplicates(cupy.asarray(user), cupy.asarray(item), cupy.asarray(time))
    np.testing.assert_array_equal(keep_gpu.get(), keep)
    user, item, time = user[keep], item[keep], time[keep]
    mask, dropped = min_count_mask(user, 60)
    mask_gpu, dropped_gpu = min_count_mask(cupy.asarray(user), 60)
    np.testing.assert_array_equal(mask_gpu.get(), mask)
    assert dropped_gpu == dropped > 0
    codes, uniques = dense_codes(user[mask])
    test = leave_one_out(codes, item[mask], time[mask], uniques.size)
    test_gpu = leave_one_out(
        cupy.asarray(codes), cupy.asarray(item[mask]), cupy.asarray(time[mask]), uniques.size
    )
    np.testing.assert_array_equal(test_gpu.get(), test)
    assert test.sum() == uniques.size


@pytest.mark.parametrize("ties", ["item-id", "file-order"])
def test_valid_test_hold_out_matches_numpy(ties):
    user, item, time = ratings(3)
    mask, _ = min_count_mask(user, 3)
    codes, uniques = dense_codes(user[mask])
    tie = item[mask] if ties == "item-id" else np.flatnonzero(mask)  # raw movieId or line number
    cpu = hold_out_latest(codes, tie, time[mask], uniques.size, 2)
    gpu = hold_out_latest(
        cupy.asarray(codes), cupy.asarray(tie), cupy.asarray(time[mask]), uniques.size, 2
    )
    for a, b in zip(cpu, gpu, strict=True):
        np.testing.assert_array_equal(b.get(), a)
        assert a.sum() == uniques.size
    assert not (cpu[0] & cpu[1]).any()


def test_helpers_match_numpy():
    values = np.array([9, 3, 9, 12, 3, 40], dtype=np.int64)
    codes, uniques = dense_codes(cupy.asarray(values))
    np.testing.assert_array_equal(codes.get(), dense_codes(values)[0])
    np.testing.assert_array_equal(uniques.get(), [3, 9, 12, 40])
    vocab = np.array([40, 3, 12, 9])
    np.testing.assert_array_equal(
        lookup(cupy.asarray(values), cupy.asarray(vocab)).get(), lookup(values, vocab)
    )
    counts = np.array([2, 0, 3, 1])
    np.testing.assert_array_equal(
        repeat(cupy.arange(4), cupy.asarray(counts)).get(), np.repeat(np.arange(4), counts)
    )
    out = group_max(cupy.asarray([5, 2, 9, 1]), cupy.asarray([0, 2, 0, 2]), 4, -1)
    np.testing.assert_array_equal(out.get(), [9, -1, 2, -1])
    hit = member(cupy.asarray([1, 4, 9]), cupy.asarray([4, 5, 9, 0]))
    np.testing.assert_array_equal(hit.get(), [True, False, True, False])


def test_negatives_on_gpu_are_exact_and_deterministic():
    rng = np.random.default_rng(1)
    n_users, n_items, n = 2000, 3000, 100
    per_user = rng.integers(1, n_items - n, n_users)  # some users leave barely n free items
    pu = np.repeat(np.arange(n_users), per_user)
    pi = np.concatenate([rng.choice(n_items, k, replace=False) for k in per_user])
    users, items = sample_negatives(cupy.asarray(pu), cupy.asarray(pi), n_users, n_items, n, 5)
    again = sample_negatives(cupy.asarray(pu), cupy.asarray(pi), n_users, n_items, n, 5)
    np.testing.assert_array_equal(again[1].get(), items.get())
    users, items = users.get(), items.get()
    np.testing.assert_array_equal(users, np.repeat(np.arange(n_users), n))
    neg_keys = users * n_items + items
    assert np.unique(neg_keys).size == neg_keys.size  # distinct per user
    assert not np.isin(neg_keys, pu * n_items + pi).any()  # never a positive
    # Each user's own stream: the GPU draws what numpy draws, row for row.
    cpu_users, cpu_items = sample_negatives(pu, pi, n_users, n_items, n, 5)
    np.testing.assert_array_equal(items, cpu_items)


@pytest.mark.parametrize("holdout, file_order", [("valid,test", True), ("test", False)])
def test_partition_steps_on_gpu_write_the_numpy_rows(holdout, file_order):
    from ncf.workflows.encoding import sorted_unique_encoding
    from ncf.workflows.partition import Summary, finish, negative_seeds, prepare

    user, item, time = ratings(3, 50_000)
    cols = {"user": user, "item": item, "time": time, "row": np.arange(user.size)}
    out = {}
    for xp in (np, cupy):
        part = prepare({k: xp.asarray(v) for k, v in cols.items()}, 5, holdout, file_order)
        summary = Summary.of(part)
        encoding = sorted_unique_encoding(xp.asarray(summary.users), xp.asarray(summary.items))
        out[xp.__name__] = finish(part, encoding, 20, negative_seeds(1, len(holdout.split(","))))
    for name, (u, i) in out["numpy"].items():
        np.testing.assert_array_equal(out["cupy"][name][0], u, err_msg=name)
        np.testing.assert_array_equal(out["cupy"][name][1], i, err_msg=name)
