"""Run the epochs of a ``Trainer``: evaluate, checkpoint, log, stop at the threshold, summarize.

Rank 0 alone writes (checkpoints, DLLogger lines, metrics.json, learning_curve.png); every rank
trains and evaluates, and takes the same early-stop decision from the all-reduced HR.
"""

from __future__ import annotations

import sys
import time

from models import checkpoint
from models.plots import learning_curve
from models.trainer import Trainer
from ncf.atomic import write_json
from ncf.dllog import DLLogger

METRICS_FILE = "metrics.json"
PLOT_FILE = "learning_curve.png"
LOG_FILE = "log.json"


def summarize(history: list[dict], threshold: float, k: int) -> dict:
    """DLE's final summary over the epoch records (best accuracy, times, throughputs)."""
    if not history:
        return {"epochs_run": 0}
    hr, ndcg = f"hr@{k}", f"ndcg@{k}"
    best = max(range(len(history)), key=lambda i: (history[i][hr], -i))  # first best epoch
    target = next((h for h in history if h[hr] >= threshold), None)
    train_tp = [h["train_throughput"] for h in history]
    eval_tp = [h["eval_throughput"] for h in history]
    return {
        "best_accuracy": history[best][hr],
        "best_epoch": history[best]["epoch"],
        f"best_{ndcg}": history[best][ndcg],
        "time_to_best_model": history[best]["elapsed"],
        "time_to_target": target["elapsed"] if target else None,
        "time_to_train": history[-1]["elapsed"],
        "best_train_throughput": max(train_tp),
        "mean_train_throughput": sum(train_tp) / len(train_tp),
        "best_eval_throughput": max(eval_tp),
        "mean_eval_throughput": sum(eval_tp) / len(eval_tp),
        "train_loss": history[-1]["loss"],
        "epochs_run": len(history),
    }


def declare_metrics(log: DLLogger, k: int) -> None:
    """DLLogger METADATA lines: the unit and format of each per-epoch metric (as DLE declares them)."""
    for name, unit in (
        ("train_throughput", "samples/s"),
        ("eval_throughput", "samples/s"),
        ("train_epoch_time", "s"),
        ("eval_epoch_time", "s"),
        ("elapsed", "s"),
        (f"hr@{k}", None),
        (f"ndcg@{k}", None),
        ("loss", None),
    ):
        log.metadata(name, {"unit": unit, "format": ":.4f"})


def _progress(tr: Trainer, epoch: int):
    if not tr.opts.progress:  # decided once by models.progress.show_bar
        return None
    from tqdm import tqdm

    n_batches = -(-tr.data.train_users.numel() * (1 + tr.cfg.negatives) // tr.cfg.batch_size)
    return tqdm(total=n_batches, desc=f"epoch {epoch}", unit="batch", leave=False, file=sys.stderr)


def run_epochs(tr: Trainer, log: DLLogger) -> None:
    """Train from ``tr.start_epoch`` to the last epoch or the HR threshold."""
    k, cfg = tr.cfg.topk, tr.cfg
    best = max((h[f"hr@{k}"] for h in tr.history), default=-1.0)
    elapsed = tr.history[-1]["elapsed"] if tr.history else 0.0
    if any(h[f"hr@{k}"] >= cfg.threshold for h in tr.history):
        return  # a resumed run that had already reached the target
    saver = checkpoint.BackgroundSaver()  # epoch e's files are written while epoch e+1 trains
    try:
        _epochs(tr, log, saver, best, elapsed)
    finally:
        saver.wait()


def _epochs(
    tr: Trainer, log: DLLogger, saver: checkpoint.BackgroundSaver, best: float, elapsed: float
) -> None:
    k, out, cfg = tr.cfg.topk, tr.opts.out, tr.cfg
    clock = (
        time.perf_counter() - elapsed
    )  # elapsed: wall time of the epochs so far, resumes included
    for epoch in range(tr.start_epoch, cfg.epochs):
        bar = _progress(tr, epoch)
        stats = tr.train_epoch(epoch, bar)
        if bar is not None:
            bar.close()
        ev = tr.evaluate()
        rec = {
            "epoch": epoch,
            "loss": stats["loss"],
            f"hr@{k}": ev["hr"],
            f"ndcg@{k}": ev["ndcg"],
            "train_throughput": stats["train_throughput"],
            "train_epoch_time": stats["train_epoch_time"],
            "eval_epoch_time": ev["seconds"],
            "eval_throughput": ev["samples"] / max(ev["seconds"], 1e-9),
        }
        metrics = {f"hr@{k}": ev["hr"], f"ndcg@{k}": ev["ndcg"]}
        jobs = (
            [(out / checkpoint.BEST, tr.state(epoch, metrics, full=False))]
            if ev["hr"] > best
            else []
        )
        best = max(best, ev["hr"])
        rec["elapsed"] = time.perf_counter() - clock
        tr.history.append(rec)
        if tr.env.is_main:
            # best.pt before last.pt: a kill in between resumes from the previous epoch and redoes it.
            saver.submit([*jobs, (out / checkpoint.LAST, tr.state(epoch, metrics, full=True))])
            log.log(step=(epoch,), data={kk: v for kk, v in rec.items() if kk != "epoch"})
            log.flush()
        if ev["hr"] >= cfg.threshold:
            break


def write_outputs(tr: Trainer, log: DLLogger, itempop: dict, extra: dict) -> dict:
    """Final DLLogger summary, metrics.json and the learning curve (rank 0 only); the summary."""
    k = tr.cfg.topk
    summary = summarize(tr.history, tr.cfg.threshold, k)
    if not tr.env.is_main:
        return summary
    log.log(step=(), data=summary)
    last = tr.history[-1] if tr.history else {}
    metrics = {
        **summary,
        f"hr@{k}": summary.get("best_accuracy"),
        f"ndcg@{k}": summary.get(f"best_ndcg@{k}"),
        f"final_hr@{k}": last.get(f"hr@{k}"),
        f"final_ndcg@{k}": last.get(f"ndcg@{k}"),
        f"itempop_hr@{k}": itempop["hr"],
        f"itempop_ndcg@{k}": itempop["ndcg"],
        "train_samples_per_s": summary.get("mean_train_throughput"),
        "checkpoint": checkpoint.BEST,
        "preset": tr.opts.preset,
        "config": tr.cfg.to_dict(),
        **extra,
        "history": tr.history,
    }
    write_json(tr.opts.out / METRICS_FILE, metrics)
    if tr.history:
        learning_curve(
            tr.history,
            tr.opts.out / PLOT_FILE,
            k,
            itempop,
            title=f"NeuMF on {tr.opts.etl_dir.name} (preset {tr.opts.preset})",
        )
    return summary
