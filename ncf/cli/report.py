"""The run report of ``ncf run``: ``report.md`` + ``metrics.json`` gathered from the stages' outputs."""

from __future__ import annotations

import datetime as _dt
import platform
from pathlib import Path
from typing import Any

from ncf.cli.comparison import compare, comparison_lines, suite_lines
from ncf.core import names
from ncf.core.atomic import load_json, write_json, write_text


def _load(path: Path) -> dict[str, Any]:
    """A stage's JSON output, empty if the stage did not run."""
    return load_json(path) or {}


def served_figures(
    bench: dict[str, Any], model: str = names.MODEL_NEUMF, batch: int = 1024
) -> dict[str, Any]:
    """The best-throughput row of ``model`` at ``batch`` in a ``bench triton`` result (empty if none)."""
    rows = [r for r in bench.get("rows", []) if r.get("model") == model and r.get("batch") == batch]
    if not rows:
        return {}
    best = max(rows, key=lambda r: r.get("samples_per_s") or 0.0)
    return {
        "served_model": model,
        "served_batch": batch,
        "served_protocol": best.get("protocol"),
        "served_concurrency": best.get("concurrency"),
        "served_samples_per_s": best.get("samples_per_s"),
        "served_p99_ms": best.get("lat_p99_ms"),
        "served_generator": best.get("generator"),
    }


ACCURACY_KEYS = ("hr@10", "ndcg@10", "full_hr@10", "full_ndcg@10", "full_mrr")


def accuracy_rows(
    evaluation: dict[str, Any], evaluation_mf: dict[str, Any], train: dict[str, Any], train_mf: dict
) -> list[dict[str, Any]]:
    """ItemPop, MF and NeuMF rows of the accuracy table: ``ncf evaluate`` figures, else training's.

    A figure neither file has is None (e.g. full ranking when evaluate ran without it).
    """

    def pick(ev: dict, fallback: dict, prefix: str = "") -> dict[str, Any]:
        return {k: ev.get(prefix + k, fallback.get(prefix + k)) for k in ACCURACY_KEYS}

    rows = [{"ranking": "ItemPop", **pick(evaluation or evaluation_mf, train, "itempop_")}]
    for label, ev, tr in (("MF", evaluation_mf, train_mf), ("NeuMF", evaluation, train)):
        if ev or tr:
            rows.append(
                {"ranking": label, "preset": tr.get("preset"), "best_epoch": tr.get("best_epoch"),
                 **pick(ev, tr)}
            )  # fmt: skip
    return rows


def write_report(
    run_dir: Path,
    etl_dir: Path,
    train_dir: Path,
    bench_dir: Path,
    stages: list[dict],
    total_seconds: float,
    input_path: Path,
) -> dict[str, Any]:
    """Write ``run_dir/report.md`` and ``run_dir/metrics.json``; return the summary dict.

    MF figures come from ``run_dir/train-mf/`` and ``run_dir/evaluation-mf.json`` when present.
    """
    meta = _load(etl_dir / names.METADATA_FILE)
    train = _load(train_dir / "metrics.json")
    evaluation = _load(run_dir / "evaluation.json")
    evaluation_mf = _load(run_dir / "evaluation-mf.json")
    bench = _load(bench_dir / "triton.json")
    tests = compare(run_dir, run_dir / "evaluation.json", run_dir / "evaluation-mf.json")
    summary: dict[str, Any] = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "input": str(input_path),
        "machine": platform.node(),
        "total_seconds": total_seconds,
        "hr@10": evaluation.get("hr@10", train.get("hr@10")),
        "ndcg@10": evaluation.get("ndcg@10", train.get("ndcg@10")),
        "itempop_hr@10": evaluation.get("itempop_hr@10", train.get("itempop_hr@10")),
        "itempop_ndcg@10": evaluation.get("itempop_ndcg@10", train.get("itempop_ndcg@10")),
        "accuracy": accuracy_rows(
            evaluation, evaluation_mf, train, _load(run_dir / "train-mf" / "metrics.json")
        ),
        "suite": {"neumf": evaluation.get("suite"), "mf": evaluation_mf.get("suite")},
        "neumf_vs_mf": tests,
        "negatives_per_user": evaluation.get("negatives_per_user"),
        "full_candidates_per_user": evaluation.get("full_candidates_per_user"),
        "best_epoch": train.get("best_epoch"),
        "protocol": train.get("protocol"),
        "train_samples_per_s": train.get("train_samples_per_s"),
        "preset": train.get("preset"),
        **served_figures(bench),
        "users": meta.get("n_users"),
        "items": meta.get("n_items"),
        "train_rows": meta.get("train_rows"),
        "stages": stages,
    }
    write_json(run_dir / "metrics.json", summary)
    extra = suite_lines(evaluation, evaluation_mf) + comparison_lines(tests)
    write_text(
        run_dir / "report.md", _markdown(summary, run_dir, train_dir, bench_dir, bench, extra)
    )
    return summary


PROTOCOL_NOTES = {
    "valid-selected": "Protocol: valid-selected. The epoch was chosen on validation HR@10 (each "
    "user's second-latest interaction); the test figures are that checkpoint's, scored once.",
    "best-test-epoch (DLE)": "Protocol: best-test-epoch (DLE). The epoch with the best test HR@10 "
    "is reported, as DeepLearningExamples do: an optimistic figure.",
}


def protocol_note(protocol: str | None) -> list[str]:
    """The report lines saying which protocol the accuracy figures come from (docs/PROTOCOL.md)."""
    note = PROTOCOL_NOTES.get(protocol or "")
    if not note:
        return []
    return [
        f"{note} ItemPop has nothing to select: it is scored on the test split. See docs/PROTOCOL.md.",
        "",
    ]


def accuracy_table(s: dict[str, Any]) -> list[str]:
    """The accuracy section of ``report.md``: sampled and full-ranking figures side by side."""
    lines = [
        "## Accuracy (leave-one-out: each user's latest item)",
        "",
        *protocol_note(s.get("protocol")),
        f"Sampled: the held-out item among the ETL's {_fmt(s.get('negatives_per_user'), ',')} "
        "negatives. Full: among every item the user has not interacted with in training "
        f"({_fmt(s.get('full_candidates_per_user'), ',.0f')} candidates per user on average; "
        "HR@10 is Recall@10 there). Tied scores count as the expected position over a random "
        "order of the tied items.",
        "",
        "| ranking | HR@10 sampled | NDCG@10 sampled | HR@10 full | NDCG@10 full | MRR full |",
        "|---|---|---|---|---|---|",
    ]
    for row in s["accuracy"]:
        name = row["ranking"]
        if row.get("preset") is not None:
            name += f" (preset {row['preset']}, best epoch {row['best_epoch']})"
        cells = " | ".join(_fmt(row[k], ".4f") for k in ACCURACY_KEYS)
        lines.append(f"| {name} | {cells} |")
    return [*lines, ""]


def _fmt(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _markdown(
    s: dict[str, Any],
    run_dir: Path,
    train_dir: Path,
    bench_dir: Path,
    bench: dict,
    extra: list[str] = (),
) -> str:
    lines = [
        f"# NCF run {run_dir.name}",
        "",
        f"{s['date']} on {s['machine']}; input `{s['input']}` ({_fmt(s['users'], ',')} users, "
        f"{_fmt(s['items'], ',')} items, {_fmt(s['train_rows'], ',')} training positives); "
        f"total {s['total_seconds']} s.",
        "",
        *accuracy_table(s),
        *extra,
        f"Training throughput: {_fmt(s['train_samples_per_s'], ',.0f')} samples/s (mean over epochs).",
        "",
    ]
    curve = train_dir / "learning_curve.png"
    if curve.is_file():
        lines += [f"![learning curve]({curve.relative_to(run_dir)})", ""]
    if bench:
        lines += [
            "## Serving (real tritonserver on 127.0.0.1)",
            "",
            (bench_dir / "triton.md").read_text() if (bench_dir / "triton.md").is_file() else "",
            "",
        ]
        for png in sorted(bench_dir.glob("*.png")):
            lines += [f"![{png.stem}]({png.relative_to(run_dir)})", ""]
    lines += ["## Stages", "", "| stage | seconds | command |", "|---|---|---|"]
    lines += [f"| {st['stage']} | {st['seconds']} | `{st['command']}` |" for st in s["stages"]]
    lines += ["", f"DLLogger log: `{(train_dir / 'log.json').relative_to(run_dir)}`", ""]
    if (run_dir / names.CONFIG_FILE).is_file():  # the run's resolved config (ncf run)
        lines += [f"Rerun: `ncf run --config {run_dir / names.CONFIG_FILE}`", ""]
    return "\n".join(lines)
