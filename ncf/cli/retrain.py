"""``ncf retrain``: one day's retrain from the previous run, each stage as its own ``ncf`` process.

    ncf retrain --previous runs/20261203-101500 --input data/today/ratings.csv --server-url HOST:8000

The previous run is a run folder of ``ncf run`` or of ``ncf retrain`` (both record each stage's
config in ``RUN/configs/``). The new run folder goes beside it (``--runs``) and holds:

1. ``etl/``: ``ncf etl`` of ``--input`` with the previous ETL's settings and
   ``--vocab-from`` the previous ETL output (every known id keeps its model id);
2. ``train/``: ``ncf train`` with the previous run's settings, ``--init-from`` its ``best.pt``
   (tables grown to the new ids) for ``--epochs`` epochs;
3. ``ncf export`` into the previous run's repository as its next version, switching the server at
   ``--server-url`` (when given) without a failed or mixed request.

A user keeps between days: the previous run folder (its ``configs/`` and ``train/best.pt``), the
ETL output it names, and the repository. ``RUN/stages.json`` records every command run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import sys
from pathlib import Path

from ncf.cli.pipeline import STAGE_CONFIGS
from ncf.core import names, textfile
from ncf.core.atomic import write_json
from ncf.core.config import Config, read_config, setting, write_config
from ncf.core.runner import Runner, StageFailed
from ncf.models.checkpoint import BEST
from ncf.models.train import TrainRunConfig
from ncf.models.trainer import METRICS_FILE
from ncf.serving import repository
from ncf.serving.export import ExportConfig
from ncf.workflows.etl import EtlConfig

STAGES = ("etl", "train", "export")  # the previous run's configs/<stage>.json this reads


@dataclasses.dataclass
class RetrainConfig(Config):
    """a day's retrain: ETL with the previous ids, warm-started training, export and live switch"""

    previous: Path | None = setting(
        None, help="the previous run folder (of `ncf run` or `ncf retrain`; required)"
    )
    input: Path | None = setting(None, help="today's ratings (all of them; required)")
    runs: Path | None = setting(None, help="parent of the new run folder (unset: --previous's)")
    epochs: int = setting(1, help="epochs of the warm-started training")
    repo: Path | None = setting(None, help="Triton repository (unset: the previous export's)")
    server_url: str | None = setting(
        None, help="HTTP host:port of the tritonserver serving the repository: switch it live"
    )

    def check(self) -> None:
        """Raise ValueError naming the flag of a missing or invalid value."""
        for name in ("previous", "input"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required (see `ncf retrain --help`)")
        if self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs}: must be >= 1")


CONFIG = RetrainConfig


def check_previous(previous: Path) -> None:
    """Raise ValueError unless ``previous`` holds the stage configs a retrain starts from, and
    the checkpoint and ETL output they name (relative paths: from this working directory)."""
    missing = [s for s in STAGES if not (previous / STAGE_CONFIGS / f"{s}.json").is_file()]
    if missing:
        raise ValueError(
            f"--previous {previous}: no {STAGE_CONFIGS}/{missing[0]}.json; pass a run folder of "
            "`ncf run` or `ncf retrain` that exported a model"
        )
    etl = Path(read_config(previous / STAGE_CONFIGS / "etl.json", "etl")["out"])
    best = Path(read_config(previous / STAGE_CONFIGS / "train.json", "train")["out"]) / BEST
    for what, path in (("ETL output", etl / names.METADATA_FILE), ("checkpoint", best)):
        if not path.is_file():
            raise ValueError(
                f"--previous {previous}: its {what} {path} is missing; keep it between days "
                "(run the retrain from the directory the previous run ran in)"
            )


def _previous(cfg: RetrainConfig, stage: str) -> dict:
    return read_config(cfg.previous / STAGE_CONFIGS / f"{stage}.json", stage)


def stage_configs(cfg: RetrainConfig, run_dir: Path) -> list[tuple[str, Config]]:
    """``(stage, config)`` of the three stages, from the previous run's configs."""
    etl, train, export = (_previous(cfg, s) for s in STAGES)
    etl_dir = run_dir / "etl"
    etl_cfg = EtlConfig.from_dict(
        {**etl, "input": cfg.input, "out": etl_dir, "vocab_from": etl["out"], "force": False}
    )
    best = Path(train["out"]) / BEST
    train_cfg = TrainRunConfig.from_dict({
        **train, "data": etl_dir, "out": run_dir / "train", "init_from": best, "resume": False,
        "force": False, "hp": {**train["hp"], "epochs": cfg.epochs, "pretrain": "none"},
    })  # fmt: skip
    export_cfg = ExportConfig.from_dict({
        **export, "checkpoint": run_dir / "train" / BEST, "data": etl_dir,
        "repo": cfg.repo or export["repo"], "server_url": cfg.server_url,
    })  # fmt: skip
    return [("etl", etl_cfg), ("train", train_cfg), ("export", export_cfg)]


def run(cfg: RetrainConfig) -> int:
    """Run the three stages into a new run folder; print where it is and what it reached."""
    check_previous(cfg.previous)
    if cfg.server_url:  # refused now, not after the ETL and the training
        repository.check_server(cfg.server_url)
    runs = cfg.runs or cfg.previous.parent
    run_dir = runs / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    configs = stage_configs(cfg, run_dir)  # every config resolves before anything is written
    run_dir.mkdir(parents=True, exist_ok=False)
    write_config(run_dir / names.CONFIG_FILE, cfg, "retrain")
    runner = Runner(run_dir / STAGE_CONFIGS)
    try:
        for stage, stage_cfg in configs:
            runner.run(stage, stage, stage_cfg)
    except StageFailed as exc:  # the stage printed its own error; keep the record
        write_json(run_dir / "stages.json", runner.records)
        print(f"ncf retrain: {exc} (record: {run_dir / 'stages.json'})", file=sys.stderr)
        return 1
    write_json(run_dir / "stages.json", runner.records)
    metrics = textfile.read_json(run_dir / "train" / METRICS_FILE)
    summary = {k: metrics.get(k) for k in ("hr@10", "ndcg@10", "protocol", "init_from")}
    print(json.dumps({"run": str(run_dir), **summary}))  # one line, the last of stdout
    return 0
