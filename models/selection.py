"""Which epoch a run keeps, when it stops, and DLE's summary: pure functions of the epoch records.

Two protocols (docs/PROTOCOL.md), chosen by the data:

- ``valid-selected`` (the ETL wrote ``valid/``): every epoch is evaluated on the validation split
  only; the kept epoch (``best.pt``) is the one with the best validation HR@K (ties: NDCG@K, then
  the earlier epoch); after training, ``best.pt`` is scored once on the test split.
- ``best-test-epoch (DLE)`` (no ``valid/``): every epoch is evaluated on the test split and the
  best test HR@K is kept and reported, as NVIDIA's DeepLearningExamples do.

An epoch record (``Trainer.history``) holds ``epoch``, ``loss``, the two metric keys of
``metric_keys``, throughputs and times, and ``elapsed`` (wall time since the run began).
"""

from __future__ import annotations

from typing import Protocol

VALID_PROTOCOL = "valid-selected"
DLE_PROTOCOL = "best-test-epoch (DLE)"


class StopRule(Protocol):
    """The settings ``should_stop`` reads (a ``TrainConfig``)."""

    topk: int
    threshold: float
    patience: int
    min_epochs: int


def protocol(has_valid: bool) -> str:
    """The evaluation protocol of a run on data with (or without) a validation split."""
    return VALID_PROTOCOL if has_valid else DLE_PROTOCOL


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


def should_stop(history: list[dict], rule: StopRule, valid: bool) -> bool:
    """True once the selection HR reached ``rule.threshold``, or ``rule.patience`` epochs (> 0)
    have passed since the kept epoch without a better selection key and at least
    ``rule.min_epochs`` epochs have run."""
    if not history:
        return False
    hr, _ = metric_keys(valid, rule.topk)
    if any(h[hr] >= rule.threshold for h in history):
        return True
    since_best = len(history) - 1 - best_index(history, valid, rule.topk)
    patient = len(history) >= rule.min_epochs and since_best >= rule.patience
    return rule.patience > 0 and patient


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
