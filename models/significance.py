"""A paired bootstrap over users: is model A's per-user metric higher than model B's?"""

from __future__ import annotations

import numpy as np

RESAMPLES = 10_000  # bootstrap resamples of the users
_CHUNK = 1 << 22  # user draws per block of resamples (bounds the memory to ~32 MiB)


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = 1, level: float = 0.95
) -> dict[str, float]:
    """The mean difference ``a - b`` over users, its percentile confidence interval and p-value.

    Parameters
    ----------
    a, b
        ``[U]`` per-user metric of two models on the same users, in the same order.
    resamples
        Bootstrap resamples of the ``U`` users (drawn with replacement, the pairs kept).
    seed
        Seed of the resampling (the result is deterministic).
    level
        Coverage of the interval.

    Returns
    -------
    dict
        ``diff`` (mean of a - b), ``lo`` and ``hi`` (the interval), ``p`` (two-sided: the share of
        resampled means, shifted to a zero mean, at least as far from 0 as ``diff``; at least
        ``1 / (resamples + 1)``), ``users`` and ``resamples``.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(
            f"paired samples of shapes {a.shape} and {b.shape}: need two equal [U > 0]"
        )
    if resamples < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"resamples={resamples}, level={level}: need >= 1 and in (0, 1)")
    d = a - b
    rng = np.random.default_rng(seed)
    per_block = max(1, _CHUNK // d.size)
    means = np.concatenate(
        [
            d[rng.integers(0, d.size, (min(per_block, resamples - s), d.size))].mean(1)
            for s in range(0, resamples, per_block)
        ]
    )
    diff = float(d.mean())
    tail = (1.0 - level) / 2.0
    far = np.count_nonzero(np.abs(means - diff) >= abs(diff))
    return {
        "diff": diff,
        "lo": float(np.quantile(means, tail)),
        "hi": float(np.quantile(means, 1.0 - tail)),
        "p": (far + 1) / (resamples + 1),
        "users": int(d.size),
        "resamples": int(resamples),
    }
