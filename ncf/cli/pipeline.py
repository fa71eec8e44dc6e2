"""``ncf run``: the whole pipeline on one ratings file, each stage as its own ``ncf`` process.

ETL -> train -> evaluate -> export -> tritonserver -> query + benchmark -> stop -> report. The run's
settings are ``RunConfig``; each stage's config is built from them (the ``*_stage`` functions),
written to ``RUN_DIR/configs/<stage>.json`` and run as ``ncf STAGE --config FILE`` by
``ncf.core.runner.Runner``, so each stage logs its resolved configuration, frees its memory on exit
and can be rerun alone with the command recorded in ``stages.json`` and the report. The run's own
resolved config is ``RUN_DIR/config.json``: ``ncf run --config RUN_DIR/config.json`` runs it again
(into a new run directory).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ncf.cli.comparison import per_user_path
from ncf.cli.report import write_report
from ncf.core import names
from ncf.core.atomic import write_json
from ncf.core.config import DEFAULT_SEED, Config, flag, read_config, setting, write_config
from ncf.core.runner import Runner, StageFailed
from ncf.models.evaluate import EvaluateConfig
from ncf.models.train import TrainRunConfig
from ncf.models.tune import BEST_FILE, TuneConfig
from ncf.serving.export import ExportConfig
from ncf.workflows.etl import EtlConfig

DEFAULT_INPUT = Path("data/ml-latest-small/ratings.csv")
STAGE_CONFIGS = "configs"  # RUN_DIR/configs/<stage>.json: the config each stage ran with


@dataclasses.dataclass
class RunConfig(Config):
    """The whole pipeline end to end on one ratings file (what `make run` does)."""

    input: Path = setting(DEFAULT_INPUT, help="ratings.csv or ratings.dat")
    runs: Path = setting(Path("runs"), help="parent of the run directory")
    etl_dir: Path | None = setting(
        None,
        help="ETL output to (re)use (unset: work/etl/<input dir name>, plus -valid-test for "
        "--holdout valid,test; RUN_DIR/config.json records the directory used)",
    )
    holdout: Literal["valid,test", "test"] = setting(
        EtlConfig.holdout,
        help="ETL hold-out: valid,test (epoch chosen on validation, test scored once) or test "
        "(DLE's best-test-epoch protocol, for comparison with DLE's figures)",
    )
    repo: Path = setting(Path("triton_repo"), help="Triton model repository to export into")
    preset: str = setting("small", help="training preset (see `ncf train --help`)")
    epochs: int | None = setting(None, help="override the preset's epochs (unset: the preset's)")
    tune: int = setting(
        0,
        help="N > 0: N Optuna trials (`ncf tune`, the preset's own values among them) on the "
        "validation split before the final training, which takes the best; its cost is printed "
        "before it starts (0: off)",
    )
    eval_negatives: int = setting(
        EtlConfig.eval_negatives, help="evaluation negatives per user (`ncf etl --eval-negatives`)"
    )
    min_ratings: int = setting(EtlConfig.min_ratings, help="drop users with fewer ratings")
    seed: int = setting(DEFAULT_SEED, help="seed for ETL negatives and training")
    bench_seconds: float = setting(2.0, help="seconds per Triton benchmark point")
    skip_serving: bool = flag(False, help="stop after export (no tritonserver)")

    def check(self) -> None:
        """Raise ValueError naming the flag of an invalid value."""
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs}: must be >= 1 (or unset: the preset's)")
        if self.tune < 0:
            raise ValueError(f"--tune {self.tune}: must be >= 0 (0: no search)")
        if self.tune and self.holdout != "valid,test":
            raise ValueError(
                f"--tune {self.tune} needs --holdout valid,test (it searches on validation)"
            )
        if not self.bench_seconds > 0:
            raise ValueError(f"--bench-seconds {self.bench_seconds}: must be > 0")


def etl_stage(cfg: RunConfig, etl_dir: Path) -> EtlConfig:
    """``ncf etl``'s config of this run."""
    return EtlConfig(
        input=cfg.input,
        out=etl_dir,
        eval_negatives=cfg.eval_negatives,
        min_ratings=cfg.min_ratings,
        seed=cfg.seed,
        holdout=cfg.holdout,
    )


def train_stage(cfg: RunConfig, etl_dir: Path, out: Path, preset: str) -> TrainRunConfig:
    """``ncf train``'s config of this run (``preset``: small for NeuMF, mf-small for MF)."""
    epochs = {"epochs": cfg.epochs} if cfg.epochs is not None else {}
    return TrainRunConfig.from_preset(preset, data=etl_dir, out=out, seed=cfg.seed, **epochs)


def tune_stage(cfg: RunConfig, etl_dir: Path, out: Path) -> TuneConfig:
    """``ncf tune``'s config: ``--tune`` trials over the preset, the preset itself queued first."""
    hp = TuneConfig.base({"preset": cfg.preset})["hp"]
    epochs = {"epochs": cfg.epochs} if cfg.epochs is not None else {}
    return TuneConfig.from_dict({
        "data": etl_dir, "out": out, "trials": cfg.tune, "preset": cfg.preset,
        "startup_trials": min(TuneConfig.startup_trials, cfg.tune), "enqueue_base": True,
        "hp": {**hp, "seed": cfg.seed, **epochs},
    })  # fmt: skip


def tuned_train_stage(cfg: RunConfig, etl_dir: Path, out: Path, tune_dir: Path) -> TrainRunConfig:
    """``ncf train``'s config of the search's best trial (``tune_dir/best.json``)."""
    best = read_config(tune_dir / BEST_FILE, "train")
    return TrainRunConfig.from_dict({**best, "data": etl_dir, "out": out})


def evaluate_stage(etl_dir: Path, checkpoint: Path, out: Path) -> EvaluateConfig:
    """``ncf evaluate``'s config: sampled and full-ranking figures of ``checkpoint``, the metric
    suite and each test user's rank counts (for the report's paired test)."""
    return EvaluateConfig(
        data=etl_dir, checkpoint=checkpoint, full_ranking=True, out=out, suite=True,
        per_user=per_user_path(out),
    )  # fmt: skip


def export_stage(cfg: RunConfig, etl_dir: Path, checkpoint: Path) -> ExportConfig:
    """``ncf export``'s config: the NeuMF checkpoint into ``--repo``."""
    return ExportConfig(checkpoint=checkpoint, data=etl_dir, repo=cfg.repo)


def bench_stage(cfg: RunConfig, run_dir: Path) -> Config:
    """``ncf bench triton``'s config: the served models over HTTP and gRPC, briefly."""
    from ncf.bench.triton import TritonBench  # its client stack only where serving runs

    served = [names.MODEL_NEUMF, names.MODEL_ENSEMBLE, names.MODEL_RECOMMEND]
    return TritonBench(
        repo=cfg.repo, models=served, protocols=["http", "grpc"], batch_sizes=[1, 1024],
        concurrency=[1, 4], duration=cfg.bench_seconds, warmup=0.5, results_dir=run_dir / "bench",
    )  # fmt: skip


def stages(cfg: RunConfig, etl_dir: Path, run_dir: Path) -> list[tuple[str, str, Callable]]:
    """``(name, stage, build)`` of every stage of the run, in order; ``build()`` makes its config
    just before it runs (a stage's checks may read the outputs of the ones before)."""
    ckpt, ckpt_mf = run_dir / "train" / "best.pt", run_dir / "train-mf" / "best.pt"
    train = ("train", "train", lambda: train_stage(cfg, etl_dir, run_dir / "train", cfg.preset))
    if cfg.tune:
        tune_dir = run_dir / "tune"
        train = ("train", "train",
                 lambda: tuned_train_stage(cfg, etl_dir, run_dir / "train", tune_dir))  # fmt: skip
    steps = [
        ("etl", "etl", lambda: etl_stage(cfg, etl_dir)),
        *([("tune", "tune", lambda: tune_stage(cfg, etl_dir, tune_dir))] if cfg.tune else []),
        train,
        ("train-mf", "train", lambda: train_stage(cfg, etl_dir, run_dir / "train-mf", "mf-small")),
        ("evaluate", "evaluate", lambda: evaluate_stage(etl_dir, ckpt, run_dir / "evaluation.json")),
        ("evaluate-mf", "evaluate",
         lambda: evaluate_stage(etl_dir, ckpt_mf, run_dir / "evaluation-mf.json")),
        ("export", "export", lambda: export_stage(cfg, etl_dir, ckpt)),
    ]  # fmt: skip
    if not cfg.skip_serving:
        steps.append(("serve+bench", "bench triton", lambda: bench_stage(cfg, run_dir)))
    return steps


def default_etl_dir(input_path: Path, holdout: str) -> Path:
    """``work/etl/<input dir name>``; ``--holdout valid,test`` outputs get their own directory, so
    an output of the other protocol (or of before --holdout existed) is neither reused nor refused."""
    suffix = "" if holdout == "test" else "-" + holdout.replace(",", "-")
    return Path("work/etl") / f"{input_path.parent.name}{suffix}"


def run(cfg: RunConfig) -> int:
    """Run every stage; write ``config.json``, ``stages.json``, ``metrics.json`` and the report."""
    if not cfg.input.is_file():
        raise FileNotFoundError(
            f"{cfg.input}: no such ratings file (ncf run reads ratings.csv or ratings.dat)"
        )
    cfg = cfg.replace(etl_dir=cfg.etl_dir or default_etl_dir(cfg.input, cfg.holdout))
    run_dir = cfg.runs / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    write_config(run_dir / names.CONFIG_FILE, cfg, "run")
    runner = Runner(run_dir / STAGE_CONFIGS)
    t0 = time.perf_counter()
    try:
        for name, stage, build in stages(cfg, cfg.etl_dir, run_dir):
            runner.run(name, stage, build())
    except StageFailed as exc:  # the stage printed its own error; keep the record of the run
        write_json(run_dir / "stages.json", runner.records)
        print(f"ncf run: {exc} (record: {run_dir / 'stages.json'})", file=sys.stderr)
        return 1
    summary = write_report(
        run_dir,
        etl_dir=cfg.etl_dir,
        train_dir=run_dir / "train",
        bench_dir=run_dir / "bench",
        stages=runner.records,
        total_seconds=round(time.perf_counter() - t0, 1),
        input_path=cfg.input,
    )
    write_json(run_dir / "stages.json", runner.records)
    print(json.dumps(summary, indent=2), file=sys.stderr)
    _print_summary(summary, run_dir)
    return 0


CONFIG = RunConfig


def _print_summary(s: dict, run_dir: Path) -> None:
    def f(key: str, fmt: str) -> str:
        v = s.get(key)
        return "n/a" if v is None else format(v, fmt)

    print(f"\nrun: {run_dir}  ({s.get('total_seconds')} s)")
    print(
        f"  HR@10 {f('hr@10', '.4f')}  NDCG@10 {f('ndcg@10', '.4f')}  "
        f"(ItemPop HR@10 {f('itempop_hr@10', '.4f')}; protocol {s.get('protocol') or 'n/a'})"
    )
    for row in s.get("accuracy", []):  # ItemPop, MF, NeuMF: sampled and full-ranking figures
        cells = "  ".join(f"{k} {'n/a' if row[k] is None else format(row[k], '.4f')}"
                          for k in ("hr@10", "full_hr@10", "full_mrr"))  # fmt: skip
        print(f"  {row['ranking']:8s} {cells}")
    print(f"  train {f('train_samples_per_s', ',.0f')} samples/s")
    print(
        f"  served ({names.MODEL_NEUMF}, batch {s.get('served_batch', 'n/a')}): "
        f"{f('served_samples_per_s', ',.0f')} samples/s, p99 {f('served_p99_ms', '.2f')} ms"
    )
    print(f"  report: {run_dir / 'report.md'}")
    print(f"  rerun: ncf run --config {shlex.quote(str(run_dir / names.CONFIG_FILE))}")
