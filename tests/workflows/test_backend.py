"""numpy/cupy helpers and the raw -> model id lookup."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.workflows.backend import dense_codes, group_max, member, repeat
from ncf.workflows.encoding import lookup, sorted_unique_encoding


@pytest.mark.parametrize("big", [False, True], ids=["direct-table", "sort"])
def test_dense_codes(big):
    offset = 2**30 if big else 0  # a large id forces the sort-based path
    values = np.array([7, 3, 7, 9, 3], dtype=np.int64) + offset
    codes, uniques = dense_codes(values)
    np.testing.assert_array_equal(uniques, np.array([3, 7, 9]) + offset)
    np.testing.assert_array_equal(codes, [1, 0, 1, 2, 0])


@pytest.mark.parametrize("big", [False, True], ids=["direct-table", "searchsorted"])
def test_lookup(big):
    offset = 2**30 if big else 0
    vocab = np.array([50, 10, 30], dtype=np.int64) + offset  # any order: position = id offset
    values = np.array([30, 50, 10, 30], dtype=np.int64) + offset
    np.testing.assert_array_equal(lookup(values, vocab), [2, 0, 1, 2])


def test_group_max_and_repeat_and_member():
    out = group_max(np.array([5, 2, 9, 1]), np.array([0, 2, 0, 2]), 4, -1)
    np.testing.assert_array_equal(out, [9, -1, 2, -1])
    np.testing.assert_array_equal(repeat(np.array([4, 5, 6]), np.array([2, 0, 1])), [4, 4, 6])
    np.testing.assert_array_equal(
        member(np.array([1, 4, 9]), np.array([4, 5, 9, 0])), [True, False, True, False]
    )
    assert not member(np.array([], dtype=np.int64), np.array([1])).any()


def test_sorted_unique_encoding():
    enc = sorted_unique_encoding(np.array([20, 10]), np.array([5, 3, 8]))
    assert (enc.user.lo, enc.user.hi, enc.user.cardinality) == (0, 2, 2)
    np.testing.assert_array_equal(enc.item.index(np.array([8, 3, 5])), [2, 0, 1])
