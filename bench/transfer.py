"""Candidate training defaults on several data sets at once, scored on validation only.

    ncf bench transfer --etl work/xfer/small work/xfer/ml100k work/xfer/dense work/xfer/sparse \
        --candidates "small" "small --dropout-at input" --seeds 1

Each candidate is a preset and ``ncf train`` flags over it; each (candidate, data set, seed) is
one real ``ncf train`` subprocess. The table holds every run's best validation HR@10 / NDCG@10,
its epoch and cost, then one row per candidate: its mean validation HR@10 over the data sets and
its mean rank among the candidates (1 = best on every data set). The test split is scored by
``ncf train`` as always but never read here: a default is chosen on these figures, and its test
figure is measured afterwards, once (``ncf bench train --preset-check``).
Results: ``bench/results/<name>.json`` / ``.md`` (default ``transfer``).
"""

from __future__ import annotations

import shlex
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.bench.train_preset import train
from ncf.core.config import DEFAULT_SEED, Config, setting

COLUMNS = ("candidate", "data", "seed", "valid_hr@10", "valid_ndcg@10", "best_epoch",
           "epochs_run", "train_s", "mean_valid_hr@10", "mean_rank")  # fmt: skip


@dataclass
class TransferBench(Config):
    """Candidate training defaults on several data sets at once, scored on validation only."""

    etl: list[Path] = setting(
        default_factory=list, help="`ncf etl --holdout valid,test` outputs, one per data set"
    )
    candidates: list[str] = setting(
        default_factory=lambda: ["small"],
        help='each "PRESET [ncf train flags]", e.g. "small --dropout-at input"',
    )
    seeds: list[int] = setting(default_factory=lambda: [DEFAULT_SEED], help="one run per seed")
    jobs: int = setting(1, help="runs at once")
    threads: int = setting(1, help="CPU threads per run (`ncf train --threads`; 0: all cores)")
    name: str = setting("transfer", help="results name")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        for etl in self.etl:
            if not (etl / "valid").is_dir():
                raise ValueError(
                    f"--etl {etl}: no valid/ split; make it with `ncf etl --holdout valid,test`"
                )
        if not self.candidates or self.jobs < 1 or self.threads < 0:
            raise ValueError(
                f"--candidates {self.candidates} / --jobs {self.jobs} / --threads {self.threads}: "
                "need >= 1 candidate, >= 1 job, >= 0 threads"
            )


CONFIG = TransferBench


def one_run(candidate: str, etl: Path, seed: int, out: Path, threads: int) -> dict:
    """Train ``candidate`` on ``etl`` with ``seed``; its validation row (test never read)."""
    preset, *flags = shlex.split(candidate)
    extra = [*flags, "--device", "cpu"] + (["--threads", str(threads)] if threads else [])
    m, _ = train(etl, preset, seed, out, extra)
    valid = m["valid"]
    return {"candidate": candidate, "data": etl.name, "seed": seed, "valid_hr@10": valid["hr@10"],
            "valid_ndcg@10": valid["ndcg@10"], "best_epoch": m["best_epoch"],
            "epochs_run": m["epochs_run"], "train_s": round(m["time_to_train"], 1)}  # fmt: skip


def summary_rows(rows: list[dict], candidates: list[str]) -> list[dict]:
    """Per candidate: mean validation HR@10 over data sets and seeds, and mean rank per data set."""
    datasets = sorted({r["data"] for r in rows})
    mean = {c: {d: 0.0 for d in datasets} for c in candidates}
    for c in candidates:
        for d in datasets:
            hrs = [r["valid_hr@10"] for r in rows if r["candidate"] == c and r["data"] == d]
            mean[c][d] = sum(hrs) / len(hrs)
    ranks = {c: 0.0 for c in candidates}
    for d in datasets:
        order = sorted(candidates, key=lambda c: -mean[c][d])
        for i, c in enumerate(order):
            ranks[c] += (i + 1) / len(datasets)
    return [{"candidate": c, "data": "all", "mean_valid_hr@10": sum(mean[c].values()) / len(datasets),
             "mean_rank": ranks[c]} for c in candidates]  # fmt: skip


def run(cfg: TransferBench) -> Results:
    if not cfg.etl:  # here, not in check(): every bench config resolves without flags
        raise ValueError("--etl: name at least one `ncf etl --holdout valid,test` output")
    plan = [(c, etl, s) for c in cfg.candidates for etl in cfg.etl for s in cfg.seeds]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(cfg.jobs) as pool:
        futures = [pool.submit(one_run, c, etl, s, Path(tmp) / f"run{i}", cfg.threads)
                   for i, (c, etl, s) in enumerate(plan)]  # fmt: skip
        rows = [f.result() for f in futures]
    for r in rows:
        print(f"{r['candidate']!r} {r['data']} seed {r['seed']}: valid HR@10 {r['valid_hr@10']:.4f}"
              f" (epoch {r['best_epoch']} of {r['epochs_run']}, {r['train_s']} s)")  # fmt: skip
    about = f"{len(cfg.candidates)} candidates on {', '.join(e.name for e in cfg.etl)}"
    return Results(cfg.name, [*rows, *summary_rows(rows, cfg.candidates)], COLUMNS,
                   f"training defaults on validation: {about}", cfg.results_dir,
                   extra={"protocol": "validation only (test never read)"})  # fmt: skip


if __name__ == "__main__":
    import sys

    sys.exit(entry.main(sys.modules[__name__]))
