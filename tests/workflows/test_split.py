"""De-duplication, the min-ratings filter and the leave-one-out split on hand-made tables."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.workflows.split import latest_of_duplicates, leave_one_out, min_count_mask


def arr(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_duplicates_keep_the_latest_rating():
    # rows:        0  1  2  3  4  5
    user = arr(1, 1, 2, 1, 2, 1)
    item = arr(7, 8, 7, 7, 7, 7)
    time = arr(5, 1, 3, 9, 3, 2)
    # pair (1,7): rows 0,3,5 -> latest time 9 is row 3; pair (2,7): rows 2,4 tie at 3 -> later row 4
    keep = latest_of_duplicates(user, item, time)
    np.testing.assert_array_equal(keep, [False, True, False, True, True, False])


def test_no_duplicates_keeps_everything():
    keep = latest_of_duplicates(arr(1, 1, 2), arr(1, 2, 1), arr(3, 2, 1))
    assert keep.all()


def test_min_count_mask_drops_small_users():
    mask, dropped = min_count_mask(arr(5, 9, 5, 7, 9, 5), 2)
    np.testing.assert_array_equal(mask, [True, True, True, False, True, True])
    assert dropped == 1


@pytest.mark.parametrize(
    "time,item,expected",
    [
        ((1, 5, 3), (10, 11, 12), 1),  # latest time wins
        ((5, 5, 3), (10, 11, 12), 1),  # tie on time: larger raw movieId (11 > 10)
        ((5, 5, 5), (30, 11, 12), 0),  # three-way tie: 30 is the largest
    ],
)
def test_leave_one_out_latest_with_documented_tie_break(time, item, expected):
    test = leave_one_out(arr(0, 0, 0), arr(*item), arr(*time), 1)
    assert np.flatnonzero(test).tolist() == [expected]


def test_leave_one_out_one_test_row_per_user():
    user = arr(0, 1, 0, 2, 1, 2, 2)
    time = arr(4, 1, 8, 2, 1, 7, 7)
    item = arr(1, 2, 3, 4, 5, 6, 3)
    # user 0: times 4,8 -> row 2; user 1: tie at 1 -> item 5 (row 4); user 2: tie at 7 -> item 6 (row 5)
    test = leave_one_out(user, item, time, 3)
    assert np.flatnonzero(test).tolist() == [2, 4, 5]
