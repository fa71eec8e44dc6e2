"""``ncf synth``: ML-20m-like statistics at small scale, determinism, and planted learnable structure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ncf import cli
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, read_config
from ncf.sources.synth import (
    MIN_USER_RATINGS,
    RATING_COUNTS,
    RATING_VALUES,
    TIME_MAX,
    TIME_MIN,
    SynthConfig,
    _largest_remainder,
    _soft_cap,
    generate,
    gini,
    sizes,
    timestamps,
)

SCALE = 0.002  # 277 users, 1,000 items, 40,001 ratings: well under a second


@pytest.fixture(scope="module")
def small() -> pd.DataFrame:
    return pd.DataFrame(generate(SynthConfig(scale=SCALE, seed=7)))


@pytest.mark.parametrize(
    ("scale", "expected"),
    [
        (1.0, (138_493, 26_744, 20_000_263, 9_254)),
        (0.1, (13_849, 2_674, 2_000_026, 925)),
        (0.001, (138, 1_000, 20_000, 346)),  # catalogue floor: room for 100 eval negatives
    ],
)
def test_sizes(scale: float, expected: tuple[int, int, int, int]) -> None:
    sz = sizes(scale)
    assert (sz.users, sz.items, sz.ratings, sz.max_per_user) == expected


def test_items_sets_the_catalogue_apart_from_the_scale() -> None:
    assert sizes(0.002, 6_000) == sizes(0.002).__class__(277, 6_000, 40_001, 2_076)
    sparse = pd.DataFrame(generate(SynthConfig(scale=SCALE, items=12_000, seed=7, pop_cutoff=0)))
    per_item = sparse.groupby(names.RAW_ITEM).size()
    assert len(per_item) == 12_000 and per_item.mean() < 5  # a long tail of rarely rated items
    assert len(sparse) == sizes(SCALE).ratings


@pytest.mark.parametrize("items", [-1, 999])
def test_a_catalogue_too_small_is_refused(items: int) -> None:
    with pytest.raises(ValueError, match=f"--items {items}: must be 0"):
        SynthConfig(scale=SCALE, items=items)


def test_counts_and_ranges(small: pd.DataFrame) -> None:
    sz = sizes(SCALE)
    assert len(small) == sz.ratings
    per_user = small.groupby(names.RAW_USER).size()
    assert per_user.min() >= MIN_USER_RATINGS and per_user.max() == sz.max_per_user
    assert per_user.index.tolist() == list(range(1, sz.users + 1))  # contiguous like ML-20m
    assert small[names.RAW_ITEM].nunique() == sz.items  # every item rated at least once
    assert small[names.RAW_TIME].min() == TIME_MIN and small[names.RAW_TIME].max() == TIME_MAX
    assert set(small[names.RAW_RATING].unique()) <= set(RATING_VALUES.tolist())


def test_no_duplicates_and_real_file_order(small: pd.DataFrame) -> None:
    assert not small.duplicated([names.RAW_USER, names.RAW_ITEM]).any()
    key = small[names.RAW_USER].to_numpy(np.int64) * 10**7 + small[names.RAW_ITEM].to_numpy()
    assert np.all(np.diff(key) > 0)  # sorted by (userId, movieId) as ML-20m's ratings.csv


def test_movie_ids_are_sparse_not_contiguous(small: pd.DataFrame) -> None:
    ids = np.unique(small[names.RAW_ITEM])
    assert ids[0] == 1 and ids[-1] == 131_262
    assert ids.size < ids[-1] / 50  # spread out, as MovieLens ids are


def test_rating_values_follow_ml20m_proportions(small: pd.DataFrame) -> None:
    share = small[names.RAW_RATING].value_counts(normalize=True).reindex(RATING_VALUES)
    np.testing.assert_allclose(share.to_numpy(), RATING_COUNTS / RATING_COUNTS.sum(), atol=1e-4)


def test_timestamps_strictly_increase_within_each_user(small: pd.DataFrame) -> None:
    ts = small.sort_values([names.RAW_USER, names.RAW_TIME])
    same_user = ts[names.RAW_USER].diff() == 0
    assert (ts[names.RAW_TIME].diff()[same_user] > 0).all()  # no ties: the latest item is unique


def test_deterministic_by_seed() -> None:
    a = generate(SynthConfig(scale=0.001, seed=3))
    b = generate(SynthConfig(scale=0.001, seed=3))
    c = generate(SynthConfig(scale=0.001, seed=4))
    for col in names.RAW_COLUMNS:
        np.testing.assert_array_equal(a[col], b[col])
    assert not np.array_equal(a[names.RAW_ITEM], c[names.RAW_ITEM])


def test_cli_writes_ml20m_format(tmp_path: Path) -> None:
    out = tmp_path / "synth"
    assert cli.main(["synth", "--scale", "0.001", "--out", str(out), "--seed", "1"]) == 0
    path = out / "ratings.csv"
    lines = path.read_text().splitlines()
    assert lines[0] == "userId,movieId,rating,timestamp"
    assert len(lines) == 1 + sizes(0.001).ratings
    user, item, rating, ts = lines[1].split(",")
    assert user == "1" and rating in {f"{v:.1f}" for v in RATING_VALUES} and len(ts) in (9, 10)
    # No temp file left behind; the resolved config beside the ratings reruns the command.
    assert sorted(p.name for p in out.iterdir()) == ["ratings.config.json", "ratings.csv"]
    recorded = read_config(out / "ratings.config.json", "synth")
    assert recorded["seed"] == 1 and recorded["scale"] == 0.001
    assert SynthConfig().seed == DEFAULT_SEED
    frame = pd.read_csv(path)
    expected = generate(SynthConfig(scale=0.001, seed=1))
    np.testing.assert_array_equal(frame[names.RAW_ITEM].to_numpy(), expected[names.RAW_ITEM])
    np.testing.assert_allclose(frame[names.RAW_RATING].to_numpy(), expected[names.RAW_RATING])


def test_cli_refuses_to_overwrite_and_rejects_bad_scale(tmp_path: Path, capsys) -> None:
    path = tmp_path / "r.csv"
    path.write_text("keep")
    for force in ([], ["--force"]):  # not written by ncf synth: refused, --force or not
        assert cli.main(["synth", "--scale", "0.001", "--out", str(path), *force]) == 2
        assert "not written by `ncf synth`" in capsys.readouterr().err
        assert path.read_text() == "keep"
    assert cli.main(["synth", "--scale", "-1", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--scale -1.0" in capsys.readouterr().err


def test_gini_hand_computed() -> None:
    assert gini(np.array([5, 5, 5, 5])) == pytest.approx(0.0)
    assert gini(np.array([0, 0, 0, 8])) == pytest.approx(0.75)  # (2*4-4-1)*8 / (4*8)
    assert gini(np.array([1, 3])) == pytest.approx(0.25)  # (-1*1 + 1*3) / (2*4)


def test_largest_remainder_quotas() -> None:
    np.testing.assert_array_equal(_largest_remainder(np.array([0.5, 0.5]), 3), [2, 1])
    np.testing.assert_array_equal(_largest_remainder(np.array([0.2, 0.3, 0.5]), 7), [1, 2, 4])
    q = _largest_remainder(RATING_COUNTS / RATING_COUNTS.sum(), int(RATING_COUNTS.sum()))
    np.testing.assert_array_equal(q, RATING_COUNTS)  # exact ML-20m counts at full size


def test_soft_cap_is_identity_below_knee_and_bounded() -> None:
    x = np.array([0.0, 10.0, 50.0, 51.0, 1e6])
    y = _soft_cap(x, 100.0)
    np.testing.assert_allclose(y[:3], x[:3])
    assert 50.0 < y[3] < 51.0 and 99.0 < y[4] <= 100.0


def test_timestamps_hand_case() -> None:
    rng = np.random.default_rng(0)
    user = np.array([4, 4, 4, 9, 2, 2])  # grouped rows, any user order
    ts = timestamps(rng, user, counts=np.array([0]))
    assert np.all(np.diff(ts[:3]) > 0) and np.all(np.diff(ts[4:]) > 0)
    assert ts.min() >= TIME_MIN and ts.max() <= TIME_MAX


# --- learnability: leave-last-out HR@10 against 100 sampled negatives, pure numpy ---------------


def _leave_last_out(cols: dict[str, np.ndarray]):
    """Dense train matrix [users, items] and each user's latest item [users]."""
    user = cols[names.RAW_USER].astype(np.int64) - 1
    item = np.unique(cols[names.RAW_ITEM], return_inverse=True)[1].ravel()
    order = np.lexsort((cols[names.RAW_TIME], user))
    user, item = user[order], item[order]
    last = np.r_[user[1:] != user[:-1], True]
    x = np.zeros((user.max() + 1, item.max() + 1), np.float32)
    x[user[~last], item[~last]] = 1.0
    return x, item[last]


def _hit_rates(cols: dict[str, np.ndarray], rank: int = 20) -> dict[str, float]:
    """HR@10 of popularity and of PureSVD (rank-``rank`` item factors) on the same candidates.

    Ties count half (a popularity tie among never-rated negatives is neither a win nor a loss).
    """
    x, test = _leave_last_out(cols)
    n_users, n_items = x.shape
    rng = np.random.default_rng(0)
    seen = x.copy()
    seen[np.arange(n_users), test] = 1.0
    cand = rng.integers(0, n_items, (n_users, 400))
    valid = seen[np.arange(n_users)[:, None], cand] == 0
    neg = np.take_along_axis(cand, np.argsort(~valid, axis=1, kind="stable")[:, :100], 1)
    items = np.concatenate([test[:, None], neg], axis=1)  # [users, 101], test item first
    pop = x.sum(0)
    v = np.linalg.svd(x / np.sqrt(np.maximum(pop, 1.0)), full_matrices=False)[2][:rank].T
    scores = {"pop": pop[items], "svd": np.take_along_axis((x @ v) @ v.T, items, 1)}
    out = {}
    for name, s in scores.items():
        ahead = (s[:, 1:] > s[:, :1]).sum(1) + 0.5 * (s[:, 1:] == s[:, :1]).sum(1)
        out[name] = float((ahead < 10).mean())
    return out


def test_planted_structure_beats_popularity() -> None:
    hr = _hit_rates(generate(SynthConfig(scale=0.005, seed=11)))
    assert hr["svd"] > hr["pop"] + 0.05, hr  # measured: 0.828 vs 0.737


def test_without_structure_popularity_is_as_good() -> None:
    # Control: with the tastes and the time drift switched off, the same scorer gains nothing, so
    # the gap above comes from the planted structure and not from the scorer.
    hr = _hit_rates(generate(SynthConfig(scale=0.005, seed=11, affinity=0.0, drift=0.0)))
    assert hr["svd"] < hr["pop"] + 0.02, hr  # measured: 0.900 vs 0.906


def test_force_replaces_only_what_synth_wrote(tmp_path: Path, capsys) -> None:
    out = tmp_path / "d"
    args = ["synth", "--scale", "0.001", "--out", str(out)]
    assert cli.main(args) == 0
    assert cli.main(args) == 2
    assert "pass --force" in capsys.readouterr().err
    assert cli.main([*args, "--seed", "2", "--force"]) == 0
    assert read_config(out / "ratings.config.json", "synth")["seed"] == 2
    assert sorted(p.name for p in out.iterdir()) == ["ratings.config.json", "ratings.csv"]
    (out / "ratings.config.json").unlink()  # the record gone: no longer known as synth's output
    assert cli.main([*args, "--force"]) == 2
    assert "not written by `ncf synth`" in capsys.readouterr().err
    folder = tmp_path / "x.csv"
    folder.mkdir()
    (folder / "mine.txt").write_text("keep")
    assert cli.main(["synth", "--scale", "0.001", "--out", str(folder), "--force"]) == 2
    assert "is a folder of 1 entries" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["mine.txt"]
