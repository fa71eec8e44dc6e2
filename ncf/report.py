"""The run report of ``ncf run``: ``report.md`` + ``metrics.json`` gathered from the stages' outputs."""

from __future__ import annotations

import datetime as _dt
import json
import platform
from pathlib import Path
from typing import Any

from ncf import names
from ncf.atomic import write_json, write_text


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


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


def write_report(
    run_dir: Path,
    etl_dir: Path,
    train_dir: Path,
    bench_dir: Path,
    stages: list[dict],
    total_seconds: float,
    input_path: Path,
) -> dict[str, Any]:
    """Write ``run_dir/report.md`` and ``run_dir/metrics.json``; return the summary dict."""
    meta = _load(etl_dir / names.METADATA_FILE)
    train = _load(train_dir / "metrics.json")
    evaluation = _load(run_dir / "evaluation.json")
    bench = _load(bench_dir / "triton.json")
    summary: dict[str, Any] = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "input": str(input_path),
        "machine": platform.node(),
        "total_seconds": total_seconds,
        "hr@10": evaluation.get("hr@10", train.get("hr@10")),
        "ndcg@10": evaluation.get("ndcg@10", train.get("ndcg@10")),
        "itempop_hr@10": evaluation.get("itempop_hr@10", train.get("itempop_hr@10")),
        "itempop_ndcg@10": evaluation.get("itempop_ndcg@10", train.get("itempop_ndcg@10")),
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
    write_text(run_dir / "report.md", _markdown(summary, run_dir, train_dir, bench_dir, bench))
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


def _fmt(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _markdown(
    s: dict[str, Any], run_dir: Path, train_dir: Path, bench_dir: Path, bench: dict
) -> str:
    lines = [
        f"# NCF run {run_dir.name}",
        "",
        f"{s['date']} on {s['machine']}; input `{s['input']}` ({_fmt(s['users'], ',')} users, "
        f"{_fmt(s['items'], ',')} items, {_fmt(s['train_rows'], ',')} training positives); "
        f"total {s['total_seconds']} s.",
        "",
        "## Accuracy (leave-one-out, test item vs the ETL's negatives)",
        "",
        *protocol_note(s.get("protocol")),
        "| ranking | HR@10 | NDCG@10 |",
        "|---|---|---|",
        f"| NeuMF (preset {s['preset']}, best epoch {s['best_epoch']}) | {_fmt(s['hr@10'], '.4f')} "
        f"| {_fmt(s['ndcg@10'], '.4f')} |",
        f"| ItemPop baseline | {_fmt(s['itempop_hr@10'], '.4f')} | {_fmt(s['itempop_ndcg@10'], '.4f')} |",
        "",
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
    return "\n".join(lines)
