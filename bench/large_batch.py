"""Larger batches that still converge: the learning-rate rule at 4x the batch, same epochs.

    python -m ncf.bench.large_batch                      # synth scale 0.05, batch 16K vs 64K
    python -m ncf.bench.large_batch --scale 0.25 --base-batch 65536

On ``ncf synth --scale S`` (made once under ``--data``, then ``ncf etl`` with a validation
split), three ``ncf train --preset dle`` runs of ``--epochs`` epochs each, one seed:

- the base batch at the preset's lr (the reference),
- ``--factor`` times the batch at the same lr (no rule),
- ``--factor`` times the batch with the train config's rule (``--lr-batch BASE --warmup-epochs
  W``: the lr times sqrt(factor) after a linear warm-up; ``TrainConfig.lr_at``).

The batch-to-epoch ratio of ML-20m at batch 1M is kept roughly by scaling the data and the batch
together. Each run's test HR@10 is that of its epoch chosen on validation (protocol
valid-selected); the verdict: the rule's run within ``TOLERANCE`` of the reference.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.bench.train_preset import train
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.models.presets import TrainConfig

TOLERANCE = 0.005  # HR@10 of the 4x batch with the rule against the base batch's
COLUMNS = ("run", "batch", "lr", "lr_batch", "warmup_epochs", "steps_per_epoch", "best_epoch",
           "valid_hr@10", "hr@10", "ndcg@10", "vs_base", "train_s")  # fmt: skip


@dataclass
class LargeBatchBench(Config):
    """HR@10 at 4x the batch with and without the learning-rate rule, same epochs."""

    scale: float = setting(0.05, help="`ncf synth --scale` of the data (1.0 = 20M ratings)")
    base_batch: int = setting(16384, help="the reference batch (the preset's lr holds there)")
    factor: int = setting(4, help="the large batch = factor x base batch")
    epochs: int = setting(8, help="epochs of every run")
    warmup_epochs: float = setting(1.0, help="`ncf train --warmup-epochs` of the rule's run")
    preset: str = setting("dle", help="`ncf train --preset` of every run")
    seed: int = setting(DEFAULT_SEED, help="seed of every run")
    threads: int = setting(0, help="`ncf train --threads` (0: all cores)")
    data: Path = setting(Path("data/synth/large-batch"), help="data and ETL outputs (kept)")
    work: Path = setting(Path("work/bench-large-batch"), help="run folders")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        if self.scale <= 0 or self.base_batch < 1 or self.factor < 2 or self.epochs < 1:
            raise ValueError(
                f"--scale {self.scale} / --base-batch {self.base_batch} / --factor {self.factor} "
                f"/ --epochs {self.epochs}: need > 0 / >= 1 / >= 2 / >= 1"
            )


CONFIG = LargeBatchBench


def etl_dir(cfg: LargeBatchBench) -> Path:
    """``ncf etl`` of ``ncf synth --scale`` (both made on first use)."""
    root = cfg.data / f"scale{cfg.scale:g}"
    ratings, etl = root / "ratings.csv", root / "etl"
    cli = [sys.executable, "-m", "ncf.cli"]
    if not ratings.is_file():
        subprocess.run(
            [*cli, "synth", "--scale", f"{cfg.scale:g}", "--out", str(ratings)], check=True
        )
    if not (etl / "valid").is_dir():
        subprocess.run([*cli, "etl", "--input", str(ratings), "--out", str(etl)], check=True)
    return etl


def one_run(cfg: LargeBatchBench, etl: Path, name: str, batch: int, rule: bool) -> dict[str, Any]:
    """One ``ncf train``; its row."""
    extra = ["-b", str(batch), "--epochs", str(cfg.epochs), "--device", "cpu"]
    extra += ["--threads", str(cfg.threads)] if cfg.threads else []
    if rule:
        extra += ["--lr-batch", str(cfg.base_batch), "--warmup-epochs", f"{cfg.warmup_epochs:g}"]
    m, _ = train(etl, cfg.preset, cfg.seed, cfg.work / name, extra)
    hp = TrainConfig(**m["config"])  # the run's resolved settings
    steps = -(-m["train_rows"] * (1 + hp.negatives) // batch)
    return {
        "run": name,
        "batch": batch,
        "lr": hp.lr_at(hp.epochs * steps - 1, steps),  # the rule's lr after any warm-up
        "lr_batch": hp.lr_batch,
        "warmup_epochs": hp.warmup_epochs,
        "steps_per_epoch": steps,
        "best_epoch": m["best_epoch"],
        "valid_hr@10": m["valid"]["hr@10"],
        "hr@10": m["hr@10"],
        "ndcg@10": m["ndcg@10"],
        "train_s": round(m["time_to_train"], 1),
    }


def run(cfg: LargeBatchBench) -> Results:
    etl = etl_dir(cfg)
    large = cfg.base_batch * cfg.factor
    rows = [
        one_run(cfg, etl, "base batch", cfg.base_batch, rule=False),
        one_run(cfg, etl, f"{cfg.factor}x batch, same lr", large, rule=False),
        one_run(cfg, etl, f"{cfg.factor}x batch, lr rule", large, rule=True),
    ]
    for r in rows:
        r["vs_base"] = round(r["hr@10"] - rows[0]["hr@10"], 4)
        print(f"{r['run']}: test HR@10 {r['hr@10']:.4f} (valid {r['valid_hr@10']:.4f}, epoch "
              f"{r['best_epoch']}), {r['train_s']} s")  # fmt: skip
    gap = rows[2]["vs_base"]
    extra = {
        "protocol": "valid-selected",
        "data": str(etl),
        "tolerance": TOLERANCE,
        "rule_within_tolerance": gap >= -TOLERANCE,  # as good as the base batch, or better
    }
    title = (f"Batch {large:,} against {cfg.base_batch:,} ({cfg.epochs} epochs, `--preset "
             f"{cfg.preset}`, synth scale {cfg.scale:g}, test HR@10 at the validation-chosen epoch)")  # fmt: skip
    return Results("large-batch", rows, COLUMNS, title, cfg.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
