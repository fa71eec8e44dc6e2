"""The NVTabular engine's ids: frequency order, equally frequent ids by ascending raw id.

Categorify's own sort leaves ties in an order that depends on the sort kernel (numpy's AVX-512
sort, its generic one, cuDF's), so the ETL's ids would differ by host; ``order_ties`` fixes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.workflows.helpers import needs_nvtabular


@needs_nvtabular
def test_equally_frequent_ids_get_ids_in_raw_id_order(tmp_path: Path):
    from ncf.workflows.workflow import fit_workflow, workflow_encoding

    rng = np.random.default_rng(0)
    # Item 7 three times, items 100..399 twice each, 5 and 6 once: fed in a shuffled order.
    items = np.concatenate([[7, 7, 7], np.repeat(np.arange(100, 400), 2), [6, 5]])
    items = rng.permutation(items).astype(np.int64)
    users = rng.integers(0, 50, items.size).astype(np.int64)
    workflow = fit_workflow((users, items), tmp_path / "fit")
    enc = workflow_encoding(workflow, np.unique(users), np.unique(items))
    want = np.concatenate([[7], np.arange(100, 400), [5, 6]])
    np.testing.assert_array_equal(np.asarray(enc.item.raw), want)
    counts = np.bincount(users)
    order = np.lexsort((np.arange(counts.size), -counts))  # count descending, then raw id
    np.testing.assert_array_equal(np.asarray(enc.user.raw), order[counts[order] > 0])
