"""PNG plots of benchmark rows (matplotlib, Agg backend), written atomically."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ncf.core.atomic import write_figure


def _series(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by the values of ``keys`` (label ``"a/b"``), in first-seen order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault("/".join(str(r.get(k)) for k in keys), []).append(r)
    return out


def line_plot(
    rows: Sequence[dict[str, Any]],
    x: str,
    y: str,
    series: Sequence[str],
    path: str | os.PathLike,
    title: str,
    logx: bool = False,
    logy: bool = False,
    y2: str | None = None,
) -> None:
    """One line per ``series`` group of ``y`` against ``x``; a second panel for ``y2`` if given.

    Parameters
    ----------
    rows
        Benchmark rows (dicts); rows missing ``x`` or ``y`` are skipped.
    series
        Keys whose values name a line, e.g. ``("backend", "precision")``.
    path
        Output PNG, written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [y] + ([y2] if y2 else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, key in zip(axes[0], panels, strict=True):
        for label, group in _series(rows, series).items():
            pts = sorted(
                (r[x], r[key]) for r in group if r.get(x) is not None and r.get(key) is not None
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xlabel(x)
        ax.set_ylabel(key)
        ax.set_xscale("log" if logx else "linear")
        ax.set_yscale("log" if logy else "linear")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    write_figure(path, fig)
