"""``ncf run``'s model comparison: the per-user file of the run and the paired NeuMF - MF tests.

``ncf evaluate --suite --per-user`` writes each test user's rank counts per model
(``evaluation-per-user.parquet``, ``evaluation-mf-per-user.parquet``); this module joins them
into ``RUN/per_user.parquet`` (``user_id`` and, per model and ranking, the 0-based rank of the
held-out item: the expected position over tied orders, ``-1`` for a miss) and bootstraps the
per-user HR@10 and NDCG@10 differences over users (``ncf.models.significance``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ncf.core import names
from ncf.core.atomic import write_bytes
from ncf.models.metrics import metric_suite
from ncf.models.ranks import MISS
from ncf.models.significance import paired_bootstrap

PER_USER = "per_user.parquet"
RANKINGS = {"sampled": "", "full": "full_"}  # ranking -> prefix of its count columns
PAIRED = ("hr@10", "ndcg@10")  # per-user metrics compared between NeuMF and MF


def per_user_path(evaluation: Path) -> Path:
    """Where ``ncf run`` has ``ncf evaluate`` write the per-user counts of ``evaluation``."""
    return evaluation.with_name(f"{evaluation.stem}-per-user.parquet")


def _counts(frame: pd.DataFrame, prefix: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    cols = (f"{prefix}greater", f"{prefix}ties")
    if not set(cols) <= set(frame.columns):
        return None
    return tuple(torch.from_numpy(frame[c].to_numpy(np.int64)) for c in cols)


def _rank(greater: torch.Tensor, ties: torch.Tensor) -> np.ndarray:
    """Expected 0-based position of the held-out item (-1 for a miss)."""
    rank = greater.double() + ties.double() / 2.0
    return torch.where(greater == MISS, -1.0, rank).numpy()


def compare(run_dir: Path, evaluation: Path, evaluation_mf: Path) -> dict[str, Any]:
    """Write ``run_dir/per_user.parquet`` and return the paired tests (empty without both files).

    Returns
    -------
    dict
        ranking -> metric -> ``paired_bootstrap`` of NeuMF minus MF.
    """
    paths = {"neumf": per_user_path(evaluation), "mf": per_user_path(evaluation_mf)}
    if not all(p.is_file() for p in paths.values()):
        return {}
    frames = {m: pd.read_parquet(p) for m, p in paths.items()}
    users = frames["neumf"][names.USER].to_numpy()
    if not np.array_equal(users, frames["mf"][names.USER].to_numpy()):
        raise ValueError(f"{paths['neumf']} and {paths['mf']}: not the same test users")
    table: dict[str, np.ndarray] = {names.USER: users}
    tests: dict[str, Any] = {}
    for ranking, prefix in RANKINGS.items():
        counts = {m: _counts(f, prefix) for m, f in frames.items()}
        counts["itempop"] = _counts(frames["neumf"], "itempop_" + prefix)
        if any(c is None for c in counts.values()):
            continue
        for model, (g, t) in counts.items():
            table[f"{model}_{ranking}_rank"] = _rank(g, t)
        per_user = {m: metric_suite(*counts[m], ks=(10,)) for m in ("neumf", "mf")}
        tests[ranking] = {
            metric: paired_bootstrap(
                per_user["neumf"][metric].numpy(), per_user["mf"][metric].numpy()
            )
            for metric in PAIRED
        }
    buf = io.BytesIO()
    pd.DataFrame(table).to_parquet(buf, index=False)
    write_bytes(run_dir / PER_USER, buf.getvalue())
    return tests


def comparison_lines(tests: dict[str, Any]) -> list[str]:
    """The report's lines on NeuMF - MF (empty without tests)."""
    if not tests:
        return []
    lines = [
        "NeuMF - MF, per user (paired bootstrap over the test users, "
        f"{next(iter(next(iter(tests.values())).values()))['resamples']:,} resamples; "
        f"per-user ranks in `{PER_USER}`):",
        "",
        "| ranking | metric | NeuMF - MF | 95% interval | p |",
        "|---|---|---|---|---|",
    ]
    for ranking, by_metric in tests.items():
        for metric, r in by_metric.items():
            lines.append(
                f"| {ranking} | {metric} | {r['diff']:+.4f} | [{r['lo']:+.4f}, {r['hi']:+.4f}] "
                f"| {r['p']:.3g} |"
            )
    return [*lines, ""]


SUITE_COLUMNS = ("hr@5", "hr@10", "hr@20", "ndcg@10", "mrr@10", "precision@10", "map@10")
FULL_COLUMNS = ("coverage@10", "avg_popularity@10")


def suite_lines(evaluation: dict[str, Any], evaluation_mf: dict[str, Any]) -> list[str]:
    """The report's table of ``ncf evaluate --suite`` figures (empty without them)."""
    rows = []
    for ranking in RANKINGS:
        for label, ev, key in (("ItemPop", evaluation, "itempop"), ("MF", evaluation_mf, "model"),
                               ("NeuMF", evaluation, "model")):  # fmt: skip
            figures = (ev.get("suite") or {}).get(ranking, {}).get(key)
            if figures:
                rows.append((ranking, label, figures))
    if not rows:
        return []
    head = [*SUITE_COLUMNS, *FULL_COLUMNS]
    lines = [
        "More metrics (RecBole's set; MAP@K = MRR@K with one held-out item; coverage: share of "
        "the catalogue in some user's top 10; popularity: mean training interactions of the "
        "recommended items):",
        "",
        "| ranking | model | " + " | ".join(head) + " |",
        "|---|---|" + "---|" * len(head),
    ]
    for ranking, label, figures in rows:
        cells = [_cell(figures.get(c), c) for c in head]
        lines.append(f"| {ranking} | {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(value: float | None, column: str) -> str:
    if value is None:
        return ""
    return f"{value:,.1f}" if column.startswith("avg_popularity") else f"{value:.4f}"
