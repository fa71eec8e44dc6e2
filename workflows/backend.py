"""Array helpers shared by the pure ETL functions, for numpy (pandas, CPU) and cupy (cuDF, GPU).

The split and negative-sampling functions work on the column arrays of a pandas or cuDF frame
(``frame[col].values`` is a numpy array for pandas and a cupy array for cuDF), so the same code
runs on both. numpy and cupy differ in a few calls (``ufunc.at``, ``repeat`` with array counts);
this module hides those differences. It imports neither cupy nor NVTabular
unless a cupy array is actually passed in.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def array_module(*arrays: Any) -> ModuleType:
    """Return ``cupy`` if any argument is a cupy array, else ``numpy``."""
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            import cupy

            return cupy
    return np


def to_numpy(a: Any) -> np.ndarray:
    """A host numpy copy (or view) of a numpy or cupy array."""
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def group_max(values: Any, groups: Any, n_groups: int, fill: int) -> Any:
    """Per-group maximum: ``out[g] = max(values[groups == g])`` (``fill`` for empty groups).

    Parameters
    ----------
    values
        int64-compatible values, shape ``[n]``.
    groups
        Group index of each value in ``[0, n_groups)``, shape ``[n]``.
    n_groups
        Number of groups.
    fill
        Value of groups that receive no element (choose it below every real value).

    Returns
    -------
    array
        int64, shape ``[n_groups]``, on the same device as ``values``.
    """
    xp = array_module(values, groups)
    out = xp.full(n_groups, fill, dtype=xp.int64)
    if xp is np:
        # O(n) scatter (ufunc.at is fast from numpy 1.25 on).
        np.maximum.at(out, groups, values.astype(np.int64, copy=False))
    else:
        import cupyx

        cupyx.scatter_max(out, groups, values.astype(xp.int64, copy=False))
    return out


def repeat(values: Any, counts: Any) -> Any:
    """``numpy.repeat(values, counts)`` with array ``counts`` (cupy's repeat takes no arrays)."""
    xp = array_module(values, counts)
    if xp is np:
        return np.repeat(values, counts)
    total = int(counts.sum())
    # Mark the first slot of every non-empty run, then a cumulative sum gives the run index.
    starts = xp.cumsum(counts) - counts
    marks = xp.zeros(total, dtype=xp.int64)
    nonempty = counts > 0
    marks[starts[nonempty]] = 1
    run = xp.cumsum(marks) - 1
    return values[xp.flatnonzero(nonempty)][run]


def stable_argsort(a: Any) -> Any:
    """Indices that sort ``a``, equal values kept in their original order (cupy's is stable)."""
    xp = array_module(a)
    return np.argsort(a, kind="stable") if xp is np else xp.argsort(a)


def member(sorted_keys: Any, keys: Any) -> Any:
    """Boolean mask: which ``keys`` occur in the ascending array ``sorted_keys`` (a sorted anti-join)."""
    xp = array_module(sorted_keys, keys)
    if sorted_keys.size == 0:
        return xp.zeros(keys.shape, dtype=bool)
    pos = xp.searchsorted(sorted_keys, keys)
    pos = xp.minimum(pos, sorted_keys.size - 1)
    return sorted_keys[pos] == keys


def dense_codes(values: Any) -> tuple[Any, Any]:
    """Sorted-unique factorization: ``uniques[codes] == values``, codes in ``[0, len(uniques))``.

    Parameters
    ----------
    values
        Non-negative integer ids, shape ``[n]``.

    Returns
    -------
    codes, uniques
        int64 codes shape ``[n]``; ascending distinct values shape ``[k]``.
    """
    xp = array_module(values)
    if values.size == 0:
        return xp.zeros(0, dtype=xp.int64), values[:0]
    top = int(values.max())
    if top < max(4 * values.size, 1 << 20):
        # Direct-address table: O(n + max id) instead of a sort, for the usual small id ranges.
        present = xp.zeros(top + 1, dtype=bool)
        present[values] = True
        uniques = xp.flatnonzero(present).astype(values.dtype)
        table = xp.cumsum(present, dtype=xp.int64) - 1
        return table[values], uniques
    uniques, codes = xp.unique(values, return_inverse=True)
    return codes.astype(xp.int64, copy=False).reshape(-1), uniques
