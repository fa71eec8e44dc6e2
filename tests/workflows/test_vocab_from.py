"""``ncf etl --vocab-from``: day 1's model ids kept on day 2, new ids dense after them.

Day 1 is ml-latest-small before its 80th-percentile timestamp, day 2 all of it (the retrain of
issue #22's measurement).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ncf.core.names import METADATA_FILE, RAW_ITEM, RAW_USER, TRAIN_DIR, WORKFLOW_DIR
from ncf.workflows.encoding import Vocabulary
from ncf.workflows.vocab_from import check_previous, extend
from tests.workflows.helpers import SMALL, etl, metadata, needs_nvtabular, read


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """day1.csv (ratings before the 80th-percentile timestamp) and day2.csv (all of them)."""
    root = tmp_path_factory.mktemp("days")
    ratings = pd.read_csv(SMALL)
    cut = ratings.timestamp.quantile(0.8)
    ratings[ratings.timestamp < cut].to_csv(root / "day1.csv", index=False)
    ratings.to_csv(root / "day2.csv", index=False)
    return root


def test_extend_keeps_old_positions_and_appends_new_in_current_order():
    old = Vocabulary(raw=np.array([50, 10, 30]), lo=3, cardinality=6)
    current = Vocabulary(raw=np.array([70, 30, 60, 50]), lo=3, cardinality=7)
    got = extend(old, current)
    np.testing.assert_array_equal(got.raw, [50, 10, 30, 70, 60])
    assert (got.lo, got.hi, got.cardinality) == (3, 8, 8)


@pytest.mark.parametrize(
    "engine,partitions",
    [
        pytest.param("nvtabular", 0, marks=needs_nvtabular),
        pytest.param("nvtabular", 2, marks=needs_nvtabular),
        ("pandas", 0),
    ],
)
def test_day1_ids_keep_their_numbers(days, tmp_path, engine, partitions):
    day1 = tmp_path / "day1"
    etl(days / "day1.csv", day1, engine=engine)
    day2 = tmp_path / "day2"
    meta = etl(days / "day2.csv", day2, engine=engine, vocab_from=day1, partitions=partitions)
    before, after = check_previous(day1, engine), check_previous(day2, engine)
    for kind in ("user", "item"):
        old, new = getattr(before, kind), getattr(after, kind)
        assert new.lo == old.lo
        # Every day-1 raw id has its day-1 model id; the new ids follow, dense, none twice.
        np.testing.assert_array_equal(new.raw[: old.size], old.raw)
        assert not np.isin(new.raw[old.size :], old.raw).any()
        assert np.unique(new.raw).size == new.size
        assert meta[f"{kind}_id_range"] == [old.lo, old.lo + new.size]
    assert after.user.size > before.user.size and after.item.size > before.item.size
    assert meta["vocab_from"]["n_users"] == before.user.size
    # The output rows are day 2's ratings under the extended numbering.
    train = read(day2, TRAIN_DIR)
    raw = pd.read_csv(days / "day2.csv")
    users = after.user.raw[train.user_id.to_numpy() - after.user.lo]
    items = after.item.raw[train.item_id.to_numpy() - after.item.lo]
    pairs = set(zip(raw.userId, raw.movieId, strict=True))
    assert all(p in pairs for p in zip(users, items, strict=True))


@needs_nvtabular
def test_saved_workflow_maps_raw_ids_as_the_vocabulary(days, tmp_path):
    from ncf.workflows.workflow import import_nvtabular, quiet_merlin

    etl(days / "day1.csv", tmp_path / "day1")
    etl(days / "day2.csv", tmp_path / "day2", vocab_from=tmp_path / "day1")
    enc = check_previous(tmp_path / "day2", "nvtabular")
    nvt = import_nvtabular()
    frame = pd.DataFrame(
        {RAW_USER: np.r_[enc.user.raw[:5], -7], RAW_ITEM: np.r_[enc.item.raw[-5:], -7]}
    )
    with quiet_merlin():
        out = nvt.Workflow.load(str(tmp_path / "day2" / WORKFLOW_DIR)).transform(frame)
    # Serving's mapping: the vocabulary's ids, and Categorify's out-of-vocabulary id 2.
    np.testing.assert_array_equal(out["user_id"], [3, 4, 5, 6, 7, 2])
    np.testing.assert_array_equal(out["item_id"], [*range(enc.item.hi - 5, enc.item.hi), 2])


def test_reuse_depends_on_the_previous_output(days, tmp_path):
    etl(days / "day1.csv", tmp_path / "day1", engine="pandas")
    kw = {"engine": "pandas", "vocab_from": tmp_path / "day1"}
    first = etl(days / "day2.csv", tmp_path / "day2", **kw)
    assert etl(days / "day2.csv", tmp_path / "day2", **kw)["created"] == first["created"]
    with pytest.raises(FileExistsError, match="vocab_from"):
        etl(days / "day2.csv", tmp_path / "day2", engine="pandas")


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d.mkdir(), "not an `ncf etl` output"),
        (lambda d: etl(SMALL, d, engine="pandas"), "--engine pandas and this run uses"),
        (lambda d: (etl(SMALL, d), (d / "workflow").rename(d / "moved")), "cannot be read"),
    ],
)
@needs_nvtabular
def test_bad_previous_fails_before_reading(tmp_path, make, message):
    make(tmp_path / "prev")
    # The input does not exist: the --vocab-from error comes first, before any read.
    with pytest.raises(ValueError, match=message):
        etl(tmp_path / "missing.csv", tmp_path / "out", vocab_from=tmp_path / "prev")
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "prev").is_dir()  # nothing of the previous output is touched
    if (tmp_path / "prev" / METADATA_FILE).exists():
        assert metadata(tmp_path / "prev")["n_users"] == 610


def test_vocab_from_its_own_out_is_refused(tmp_path):
    etl(SMALL, tmp_path / "e", engine="pandas")
    with pytest.raises(ValueError, match="is --out: the output it continues would be replaced"):
        etl(SMALL, tmp_path / "e", engine="pandas", vocab_from=tmp_path / "e", force=True)
