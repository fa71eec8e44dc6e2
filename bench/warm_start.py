"""A day's retrain warm-started from yesterday's model, against a cold retrain on the same data.

    python -m ncf.bench.warm_start                       # ml-latest-small, 1 seed
    python -m ncf.bench.warm_start --seeds 1 2 3

Day 1 is the input's ratings before the ``--quantile`` timestamp, day 2 all of them. Commands run:
``ncf etl`` of day 1; ``ncf etl --vocab-from`` day 1's output on day 2 (day-1 ids kept);
``ncf train --preset P`` on day 1 (yesterday's model); then on day 2, per seed, a cold
``ncf train --preset P`` (its own early-stopped epochs) and a warm ``ncf train --preset P
--init-from DAY1/best.pt --epochs W``. Both are scored on day 2's leave-one-out split, test HR@10
at the epoch chosen on validation (protocol valid-selected), with their training seconds.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.bench.train_preset import train
from ncf.core.config import DEFAULT_SEED, Config, setting

COLUMNS = ("run", "seed", "epochs_run", "best_epoch", "valid_hr@10", "hr@10", "ndcg@10",
           "train_s", "wall_s")  # fmt: skip


@dataclass
class WarmStartBench(Config):
    """HR@10 and time of a warm-started retrain against a cold one."""

    input: Path = setting(Path("data/ml-latest-small/ratings.csv"), help="MovieLens ratings.csv")
    quantile: float = setting(0.8, help="day 1 = ratings before this quantile of the timestamps")
    preset: str = setting("small", help="`ncf train --preset` of every run")
    warm_epochs: int = setting(1, help="epochs of the warm-started run")
    epochs: int = setting(0, help="epochs of the day-1 and cold runs (0: the preset's)")
    seeds: list[int] = setting(default_factory=lambda: [DEFAULT_SEED], help="day-2 runs per seed")
    threads: int = setting(0, help="`ncf train --threads` (0: all cores)")
    work: Path = setting(Path("work/bench-warm-start"), help="data, ETL outputs and runs (kept)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        """Raise ValueError naming the flag of an invalid value."""
        if not 0 < self.quantile < 1 or self.warm_epochs < 1 or not self.seeds:
            raise ValueError(
                f"--quantile {self.quantile} / --warm-epochs {self.warm_epochs} / --seeds "
                f"{self.seeds}: need 0 < q < 1 / >= 1 / at least one seed"
            )


CONFIG = WarmStartBench


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ncf.cli", *args], check=True)


def days(cfg: WarmStartBench) -> tuple[Path, Path]:
    """The ETL outputs of day 1 and of day 2 (numbered after day 1), rebuilt each time from
    ``--input`` and ``--quantile``."""
    root = cfg.work / "data"
    etl1, etl2 = root / "etl-day1", root / "etl-day2"
    root.mkdir(parents=True, exist_ok=True)
    ratings = pd.read_csv(cfg.input)
    cut = ratings.timestamp.quantile(cfg.quantile)
    ratings[ratings.timestamp < cut].to_csv(root / "day1.csv", index=False)
    ratings.to_csv(root / "day2.csv", index=False)
    _cli("etl", "--input", str(root / "day1.csv"), "--out", str(etl1), "--force")
    _cli("etl", "--input", str(root / "day2.csv"), "--out", str(etl2), "--force",
         "--vocab-from", str(etl1))  # fmt: skip
    return etl1, etl2


def one_run(cfg: WarmStartBench, etl: Path, name: str, seed: int, extra: list[str]) -> dict:
    """One ``ncf train`` on ``etl``; its row."""
    threads = ["--threads", str(cfg.threads)] if cfg.threads else []
    out = cfg.work / f"{name.replace(' ', '-')}-seed{seed}"
    m, wall = train(etl, cfg.preset, seed, out, [*extra, *threads, "--device", "cpu", "--force"])
    return {
        "run": name,
        "seed": seed,
        "epochs_run": m["epochs_run"],
        "best_epoch": m["best_epoch"],
        "valid_hr@10": m["valid"]["hr@10"],
        "hr@10": m["hr@10"],
        "ndcg@10": m["ndcg@10"],
        "train_s": round(m["time_to_train"], 1),
        "wall_s": round(wall, 1),
    }


def run(cfg: WarmStartBench) -> Results:
    """Day 1's run, then each seed's cold and warm day-2 runs; the table and JSON."""
    etl1, etl2 = days(cfg)
    full = ["--epochs", str(cfg.epochs)] if cfg.epochs else []
    yesterday = one_run(cfg, etl1, "day 1", DEFAULT_SEED, full)
    best = cfg.work / f"day-1-seed{DEFAULT_SEED}" / "best.pt"
    rows: list[dict[str, Any]] = [yesterday]
    for seed in cfg.seeds:
        rows.append(one_run(cfg, etl2, "day 2 cold", seed, full))
        warm = ["--init-from", str(best), "--epochs", str(cfg.warm_epochs)]
        rows.append(one_run(cfg, etl2, "day 2 warm", seed, warm))
    for r in rows:
        print(f"{r['run']} seed {r['seed']}: test HR@10 {r['hr@10']:.4f} (valid "
              f"{r['valid_hr@10']:.4f}, {r['epochs_run']} epochs) in {r['train_s']} s")  # fmt: skip
    extra = {"protocol": "valid-selected", "day1": str(etl1), "day2": str(etl2)}
    title = (f"Day 2 retrain: warm from day 1's model ({cfg.warm_epochs} epoch) against cold "
             f"(`--preset {cfg.preset}`, {cfg.input}, day 1 = before the {cfg.quantile:g} "
             "timestamp quantile; test HR@10 at the validation-chosen epoch)")  # fmt: skip
    return Results("warm-start", rows, COLUMNS, title, cfg.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
