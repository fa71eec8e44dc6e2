"""The paired bootstrap: hand-checkable cases and its behaviour on clear and absent differences."""

from __future__ import annotations

import numpy as np
import pytest

from ncf.models.significance import paired_bootstrap


def test_identical_models_differ_by_nothing():
    a = np.array([1.0, 0.0, 1.0, 1.0])
    r = paired_bootstrap(a, a, resamples=200)
    assert r["diff"] == r["lo"] == r["hi"] == 0.0 and r["p"] == 1.0


def test_a_constant_difference_is_certain():
    a, b = np.full(50, 0.7), np.full(50, 0.2)
    r = paired_bootstrap(a, b, resamples=500)
    assert r["diff"] == pytest.approx(0.5) and r["lo"] == pytest.approx(0.5)
    assert r["p"] == pytest.approx(1 / 501)  # no resample is as far from 0 once shifted


def test_a_clear_gain_is_significant_and_noise_is_not():
    rng = np.random.default_rng(3)
    b = rng.integers(0, 2, 800).astype(float)
    better = np.maximum(b, rng.random(800) < 0.2)  # wins some users, loses none
    r = paired_bootstrap(better, b, resamples=2000)
    assert r["lo"] > 0 and r["p"] < 0.01
    shuffled = rng.permutation(np.concatenate([np.ones(400), np.zeros(400)]))
    coin = rng.permutation(shuffled)
    r = paired_bootstrap(shuffled, coin, resamples=2000)
    assert r["lo"] < 0 < r["hi"] or r["p"] > 0.05


def test_the_result_is_deterministic_and_blocks_do_not_change_it(monkeypatch):
    a, b = np.random.default_rng(1).random((2, 300))
    first = paired_bootstrap(a, b, resamples=1000, seed=5)
    monkeypatch.setattr("ncf.models.significance._CHUNK", 300 * 7)  # 7 resamples per block
    assert paired_bootstrap(a, b, resamples=1000, seed=5) == first  # the same stream of draws
    assert paired_bootstrap(a, b, resamples=1000, seed=6) != first


@pytest.mark.parametrize(("a", "b"), [([], []), ([1.0], [1.0, 2.0])])
def test_unpaired_samples_are_refused(a, b):
    with pytest.raises(ValueError, match="need two equal"):
        paired_bootstrap(np.array(a), np.array(b))
