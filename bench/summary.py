"""Headline table for the README: our measured figures beside the reference systems' figures.

Ours are read from ``bench/results/*.json`` (written by the benchmarks); the reference figures are
published or measured figures (docs/FACTS.md, "Reference figures"), quoted with their source.
Written as ``bench/results/summary.md``, which ``bench/readme.py`` puts first in the README.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ncf.bench.common import RESULTS_DIR
from ncf.core.atomic import load_json, write_text

# (what, reference figure, its source) for each headline row.
REFERENCE = {
    "etl": "DLE convert.py (bench/etl_dle.py), same run, same 20M rows, this CPU",
    "train_cpu": "DLE's model and step (bench/train_dle.py), same run, this CPU, batch 1M fp32",
    "train_gpu": ("22.6M (TF32) / 34.1M (AMP) samples/s", "DLE, one A100-40G, batch 1M"),
    "epochs30": ("140.8 s (TF32) / 94.2 s (AMP)", "DLE, one A100, ML-20m"),
}
# `ncf bench train --preset-check` of `ncf run`'s preset on ml-latest-small (README, "Accuracy")
SMALL_RESULTS = "train-small-small"
RECBOLE_SOURCE = "RecBole 1.2.1 NeuMF (`ncf bench peers`), same split and seeds, this CPU"


def _load(results_dir: Path, name: str) -> dict[str, Any] | None:
    return load_json(results_dir / f"{name}.json")


def _row(rows: list[dict], **match: Any) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def headline_rows(results_dir: Path = RESULTS_DIR) -> list[tuple[str, str, str, str]]:
    """``(what, ours, reference, reference source)`` for each result present in ``results_dir``."""
    out = []
    if etl := _load(results_dir, "etl"):
        r = _row(etl["rows"], config="1 process, in memory")
        dle = _row(etl["rows"], config="DLE convert.py")
        if r and dle:
            out.append(
                (
                    "ETL of 20M ratings, exact negatives (CPU)",
                    f"{r['total_s']:.1f} s, {r['peak_rss_gb']:.2f} GB",
                    f"{dle['total_s']:.1f} s, {dle['peak_rss_gb']:.2f} GB peak RSS",
                    REFERENCE["etl"],
                )
            )
    if tr := _load(results_dir, "train"):
        f32 = _row(tr["rows"], procs=1, batch=1048576, precision="fp32")
        b16 = _row(tr["rows"], procs=1, batch=1048576, precision="bf16")
        dle = _row(tr["rows"], procs=1, batch=1048576, precision="dle")
        if f32 and b16:
            x = dle["samples_per_s"] if dle else None  # DLE's step, same run
            fp32, bf16 = (f"{r['samples_per_s'] / x:.1f}x" if x else "" for r in (f32, b16))
            ours = (
                f"{f32['samples_per_s']:,.0f} samples/s fp32 ({f32['peak_rss_gib']:.1f} GB"
                f"{', ' + fp32 if x else ''}), {b16['samples_per_s']:,.0f} bf16"
                f"{f' ({bf16})' if x else ''}"
            )
            theirs = f"{x:,.0f} samples/s, {dle['peak_rss_gib']:.1f} GB" if x else "not run"
            out.append(
                ("Training, batch 1M, 1 process (CPU)", ours, theirs, REFERENCE["train_cpu"])
            )
    if gpu := _load(results_dir, "train-cuda"):
        t = {p: _row(gpu["rows"], precision=p) for p in ("fp32", "tf32", "amp")}
        if all(t.values()):
            out.append(
                (
                    f"Training, batch 1M ({gpu['machine'].get('gpu', 'GPU')})",
                    f"{t['tf32']['samples_per_s'] / 1e6:.1f}M (TF32) / {t['amp']['samples_per_s'] / 1e6:.1f}M "
                    f"(AMP) samples/s, {t['amp']['peak_gpu_gib']:.1f} GB",
                    *REFERENCE["train_gpu"],
                )
            )
    if run := _load(results_dir, "train-cuda-run"):
        r = run["rows"][0]
        out.append(
            (
                f"30 epochs, synthetic ML-20m, AMP ({run['machine'].get('gpu', 'GPU')})",
                f"{r['time_to_train']:.1f} s; HR@10 {r['best_accuracy']:.4f} vs ItemPop "
                f"{r['itempop_hr@10']:.4f}",
                *REFERENCE["epochs30"],
            )
        )
    if small := _load(results_dir, SMALL_RESULTS):
        out.append((*_small_row(small), *_recbole_cells(small)))
    return out


def _recbole_cells(small: dict) -> tuple[str, str]:
    """RecBole's figure beside ours: only one the harness measured on the same split and seeds."""
    rb = small["summary"].get("recbole_hr@10")
    if not rb:
        return "not measured on this split", "`ncf bench train --preset-check ... --peers NAME`"
    text = f"HR@10 {rb['mean']:.3f} ({rb['min']:.3f}-{rb['max']:.3f})"
    if versus := small.get("versus_recbole"):
        text += f"; ours - RecBole {versus['diff']:+.3f} [{versus['lo']:+.3f}, {versus['hi']:+.3f}]"
    return text, RECBOLE_SOURCE


def _small_row(small: dict) -> tuple[str, str]:
    """The ml-latest-small row: NeuMF mean (range) over the seeds, MF and ItemPop beside it."""
    summary, first = small["summary"], small["rows"][0]
    seeds = len(small["rows"]) - 2  # the seeds' rows, then a mean row and a range row
    hr, nd = summary["hr@10"], summary["ndcg@10"]
    text = f"HR@10 {hr['mean']:.3f} ({hr['min']:.3f}-{hr['max']:.3f}), NDCG@10 {nd['mean']:.3f}"
    if mf := summary.get("mf_hr@10"):
        text += f"; MF {mf['mean']:.3f} ({mf['min']:.3f}-{mf['max']:.3f})"
    text += f"; ItemPop {first['itempop_hr@10']:.3f} / {first['itempop_ndcg@10']:.3f}"
    protocol = first.get("protocol") or "best test epoch"
    return f"ml-latest-small, 100 negatives, `--preset small` ({seeds} seeds, {protocol})", text


def write_summary(results_dir: Path = RESULTS_DIR) -> Path | None:
    """Write ``summary.md`` from the JSON results; return its path (None: no results to sum up)."""
    rows = headline_rows(Path(results_dir))
    if not rows:
        return None
    lines = [
        "#### Headline: this project vs the reference systems",
        "",
        "| what | this project | reference | reference source |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    path = Path(results_dir) / "summary.md"
    write_text(path, "\n".join(lines) + "\n")
    return path
