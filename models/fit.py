"""Run the epochs of a ``Trainer``: evaluate, select, checkpoint, log, stop, summarize.

Two protocols (docs/PROTOCOL.md), chosen by the data:

- ``valid-selected`` (the ETL wrote ``valid/``): every epoch is evaluated on the validation split
  only; the kept epoch (``best.pt``) is the one with the best validation HR@K (ties: NDCG@K, then
  the earlier epoch); after training, ``best.pt`` is scored once on the test split.
- ``best-test-epoch (DLE)`` (no ``valid/``): every epoch is evaluated on the test split and the
  best test HR@K is kept and reported, as NVIDIA's DeepLearningExamples do.

Rank 0 alone writes (checkpoints, DLLogger lines, metrics.json, learning_curve.png); every rank
trains and evaluates, and takes the same stop decision from the all-reduced metrics.
"""

from __future__ import annotations

import sys
import time

from ncf.core.atomic import write_json
from ncf.core.dllog import DLLogger
from ncf.models import checkpoint
from ncf.models.distributed import barrier
from ncf.models.plots import learning_curve
from ncf.models.trainer import Trainer

METRICS_FILE = "metrics.json"
PLOT_FILE = "learning_curve.png"
LOG_FILE = "log.json"
VALID_PROTOCOL = "valid-selected"
DLE_PROTOCOL = "best-test-epoch (DLE)"


def protocol(tr: Trainer) -> str:
    """The evaluation protocol of this run (see the module docstring)."""
    return VALID_PROTOCOL if tr.data.has_valid else DLE_PROTOCOL


def metric_keys(valid: bool, k: int) -> tuple[str, str]:
    """History/log keys of the per-epoch HR and NDCG: ``valid_hr@k`` with a valid split."""
    prefix = "valid_" if valid else ""
    return f"{prefix}hr@{k}", f"{prefix}ndcg@{k}"


def selection_key(rec: dict, valid: bool, k: int) -> tuple[float, ...]:
    """What the kept epoch maximizes: valid (HR, NDCG); DLE's rule is the test HR alone."""
    hr, ndcg = metric_keys(valid, k)
    return (rec[hr], rec[ndcg]) if valid else (rec[hr],)


def best_index(history: list[dict], valid: bool, k: int) -> int:
    """Index of the kept epoch: the first with the largest selection key (-1 if none)."""
    if not history:
        return -1
    return max(range(len(history)), key=lambda i: (*selection_key(history[i], valid, k), -i))


def summarize(history: list[dict], threshold: float, k: int) -> dict:
    """DLE's final summary over the epoch records (best accuracy, times, throughputs).

    With validation records (``valid_hr@k``) the best epoch is chosen on validation and the
    figures are named ``best_valid_hr@k`` / ``best_valid_ndcg@k`` (no ``best_accuracy``: that name
    means a test HR in DLE's logs).
    """
    if not history:
        return {"epochs_run": 0}
    valid = f"valid_hr@{k}" in history[0]
    hr, ndcg = metric_keys(valid, k)
    best = best_index(history, valid, k)
    target = next((h for h in history if h[hr] >= threshold), None)
    train_tp = [h["train_throughput"] for h in history]
    eval_tp = [h["eval_throughput"] for h in history]
    accuracy = {f"best_{hr}": history[best][hr]} if valid else {"best_accuracy": history[best][hr]}
    return {
        **accuracy,
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


def declare_metrics(log: DLLogger, k: int, valid: bool = False) -> None:
    """DLLogger METADATA lines: the unit and format of each per-epoch metric (as DLE declares them)."""
    hr, ndcg = metric_keys(valid, k)
    for name, unit in (
        ("train_throughput", "samples/s"),
        ("eval_throughput", "samples/s"),
        ("train_epoch_time", "s"),
        ("eval_epoch_time", "s"),
        ("elapsed", "s"),
        (hr, None),
        (ndcg, None),
        ("loss", None),
    ):
        log.metadata(name, {"unit": unit, "format": ":.4f"})


def _progress(tr: Trainer, epoch: int):
    if not tr.opts.progress:  # decided once by ncf.models.progress.show_bar
        return None
    from tqdm import tqdm

    n_batches = -(-tr.data.train_users.numel() * (1 + tr.cfg.negatives) // tr.cfg.batch_size)
    return tqdm(total=n_batches, desc=f"epoch {epoch}", unit="batch", leave=False, file=sys.stderr)


def should_stop(history: list[dict], cfg, valid: bool) -> bool:
    """True once the selection HR reached ``cfg.threshold``, or ``cfg.patience`` epochs (> 0) have
    passed since the kept epoch without a better selection key."""
    if not history:
        return False
    hr, _ = metric_keys(valid, cfg.topk)
    if any(h[hr] >= cfg.threshold for h in history):
        return True
    since_best = len(history) - 1 - best_index(history, valid, cfg.topk)
    return cfg.patience > 0 and since_best >= cfg.patience


def run_epochs(tr: Trainer, log: DLLogger) -> None:
    """Train from ``tr.start_epoch`` to the last epoch, the HR threshold or the patience; with a
    valid split, then score ``best.pt`` once on the test split (``tr.test_result``)."""
    if not should_stop(tr.history, tr.cfg, tr.data.has_valid):  # else: a finished run resumed
        saver = checkpoint.BackgroundSaver()  # epoch e's files are written while e+1 trains
        try:
            _epochs(tr, log, saver)
        finally:
            saver.wait()
    if tr.data.has_valid:
        tr.test_result = score_best_on_test(tr)


def _epochs(tr: Trainer, log: DLLogger, saver: checkpoint.BackgroundSaver) -> None:
    k, out, cfg, valid = tr.cfg.topk, tr.opts.out, tr.cfg, tr.data.has_valid
    hr, ndcg = metric_keys(valid, k)
    kept = best_index(tr.history, valid, k)
    best = selection_key(tr.history[kept], valid, k) if tr.history else (-1.0,) * (1 + valid)
    # elapsed: wall time of the epochs so far, resumes included
    clock = time.perf_counter() - (tr.history[-1]["elapsed"] if tr.history else 0.0)
    for epoch in range(tr.start_epoch, cfg.epochs):
        bar = _progress(tr, epoch)
        stats = tr.train_epoch(epoch, bar)
        if bar is not None:
            bar.close()
        ev = tr.evaluate("valid" if valid else "test")
        rec = {
            "epoch": epoch,
            "loss": stats["loss"],
            hr: ev["hr"],
            ndcg: ev["ndcg"],
            "train_throughput": stats["train_throughput"],
            "train_epoch_time": stats["train_epoch_time"],
            "eval_epoch_time": ev["seconds"],
            "eval_throughput": ev["samples"] / max(ev["seconds"], 1e-9),
        }
        metrics = {hr: ev["hr"], ndcg: ev["ndcg"]}
        jobs = []
        if selection_key(rec, valid, k) > best:
            best = selection_key(rec, valid, k)
            jobs = [(out / checkpoint.BEST, tr.state(epoch, metrics, full=False))]
        rec["elapsed"] = time.perf_counter() - clock
        tr.history.append(rec)
        if tr.env.is_main:
            # best.pt before last.pt: a kill in between resumes from the previous epoch and redoes it.
            saver.submit([*jobs, (out / checkpoint.LAST, tr.state(epoch, metrics, full=True))])
            log.log(step=(epoch,), data={kk: v for kk, v in rec.items() if kk != "epoch"})
            log.flush()
        if should_stop(tr.history, cfg, valid):
            break


def score_best_on_test(tr: Trainer) -> dict:
    """Load ``best.pt`` (written by rank 0) into the model and score it once on the test split."""
    barrier(tr.env)  # every rank waits for rank 0's saver to have written best.pt
    state = checkpoint.load(tr.opts.out / checkpoint.BEST, map_location=tr.device)
    tr.model.load_state_dict(state["model"])
    ev = tr.evaluate("test")
    k = tr.cfg.topk
    return {"epoch": int(state["epoch"]), f"hr@{k}": ev["hr"], f"ndcg@{k}": ev["ndcg"]}


def _accuracy(tr: Trainer, summary: dict, itempop: dict, valid_itempop: dict | None) -> dict:
    """The accuracy keys of metrics.json: DLE's (best test epoch) or the valid/test blocks."""
    k, last = tr.cfg.topk, tr.history[-1] if tr.history else {}
    pop = {f"itempop_hr@{k}": itempop["hr"], f"itempop_ndcg@{k}": itempop["ndcg"]}
    if not tr.data.has_valid:
        return {
            "protocol": DLE_PROTOCOL,
            f"hr@{k}": summary.get("best_accuracy"),
            f"ndcg@{k}": summary.get(f"best_ndcg@{k}"),
            f"final_hr@{k}": last.get(f"hr@{k}"),
            f"final_ndcg@{k}": last.get(f"ndcg@{k}"),
            **pop,
        }
    test = tr.test_result or {}
    vpop = valid_itempop or {}
    return {
        "protocol": VALID_PROTOCOL,
        "valid": {
            f"hr@{k}": summary.get(f"best_valid_hr@{k}"),
            f"ndcg@{k}": summary.get(f"best_valid_ndcg@{k}"),
            f"itempop_hr@{k}": vpop.get("hr"),
            f"itempop_ndcg@{k}": vpop.get("ndcg"),
        },
        "test": {f"hr@{k}": test.get(f"hr@{k}"), f"ndcg@{k}": test.get(f"ndcg@{k}"), **pop},
        # The headline figures are the test split's, of the epoch chosen on validation.
        f"hr@{k}": test.get(f"hr@{k}"),
        f"ndcg@{k}": test.get(f"ndcg@{k}"),
        f"final_valid_hr@{k}": last.get(f"valid_hr@{k}"),
        f"final_valid_ndcg@{k}": last.get(f"valid_ndcg@{k}"),
        **pop,
    }


def write_outputs(
    tr: Trainer, log: DLLogger, itempop: dict, extra: dict, valid_itempop: dict | None = None
) -> dict:
    """Final DLLogger summary, metrics.json and the learning curve (rank 0 only); the summary.

    ``itempop`` is the ItemPop baseline on the test split, ``valid_itempop`` on the valid split.
    """
    k = tr.cfg.topk
    summary = summarize(tr.history, tr.cfg.threshold, k)
    if not tr.env.is_main:
        return summary
    accuracy = _accuracy(tr, summary, itempop, valid_itempop)
    tested = {}
    if tr.test_result is not None:
        tested = {f"test_hr@{k}": accuracy[f"hr@{k}"], f"test_ndcg@{k}": accuracy[f"ndcg@{k}"]}
    log.log(step=(), data={**summary, **tested})
    metrics = {
        **summary,
        **accuracy,
        "train_samples_per_s": summary.get("mean_train_throughput"),
        "checkpoint": checkpoint.BEST,
        "preset": tr.opts.preset,
        "config": tr.cfg.to_dict(),
        **extra,
        "history": tr.history,
    }
    write_json(tr.opts.out / METRICS_FILE, metrics)
    if tr.history:
        _plot(tr, itempop if valid_itempop is None else valid_itempop)
    return summary


def _plot(tr: Trainer, itempop: dict) -> None:
    """learning_curve.png: the per-epoch metrics (validation ones with a valid split)."""
    k, valid = tr.cfg.topk, tr.data.has_valid
    hr, ndcg = metric_keys(valid, k)
    history = [{**h, f"hr@{k}": h[hr], f"ndcg@{k}": h[ndcg]} for h in tr.history]
    split = "validation" if valid else "test"
    learning_curve(
        history,
        tr.opts.out / PLOT_FILE,
        k,
        itempop,
        title=f"{tr.cfg.model} on {tr.opts.etl_dir.name} (preset {tr.opts.preset}), {split} split",
    )
