"""``ncf tune``: hyperparameter search with Optuna on the validation split.

Each trial trains with the NeuMF trainer on ``train/`` and scores HR@K on ``valid/`` after every
epoch (never on ``test/``); the trial's value is its best epoch's HR@K. TPE with a constant seed
proposes settings, a median pruner stops trials whose per-epoch HR falls below the median of
earlier trials at the same epoch. The study lives in SQLite (``OUT/study.db``): a killed search
resumes where it stopped, failing the trial it was running and queueing its settings again.

Outputs in ``OUT``: ``config.json`` (the search's resolved config), ``best.json`` (the best trial
as a config file of ``ncf train --config``, the search recorded under ``about``), ``trials.png``
(the trial history), the last two rewritten after every trial.
One ``ncf tune`` process per study (a lock file in ``OUT`` enforces it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ncf.core import names
from ncf.core.atomic import check_replaceable, write_figure, written_by
from ncf.core.config import Config, flag, flag_name, setting, write_config
from ncf.models.data import EtlData, load_etl
from ncf.models.distributed import DEVICES, DistEnv, process_group
from ncf.models.evaluate import evaluate_model
from ncf.models.presets import (
    DEFAULT_PRESET,
    DEFAULT_TOPK,
    PRESETS,
    TrainConfig,
    preset_config,
    preset_values,
)
from ncf.models.runtime import configure, default_threads
from ncf.models.selection import metric_keys, should_stop
from ncf.models.train import CONFIG_FILE, TrainRunConfig
from ncf.models.trainer import RunOptions, Trainer

VALID_DIR, VALID_NEGATIVES_DIR = names.VALID_DIR, names.VALID_NEGATIVES_DIR
HOLDOUT_HINT = "tune needs `ncf etl --holdout valid,test`"
BEST_FILE, PLOT_FILE, STUDY_FILE, LOCK_FILE = "best.json", "trials.png", "study.db", ".tune.lock"
# Test hook: SIGKILL the search in the first epoch of the trial that follows this many finished ones.
KILL_ENV = "NCF_TUNE_KILL_AFTER"
PRUNER_WARMUP_EPOCHS = 1  # never prune on the first epoch alone (its HR is noisy)
# Training samples/s of one CPU thread at the searched batch sizes, for the cost printed before a
# search (docs/PRESETS.md, "What a search costs"); more threads scale it, a GPU beats it.
CPU_SAMPLES_PER_S_PER_THREAD = 40_000

# The search spaces, by model kind: TrainConfig field -> Optuna distribution. Everything else comes
# from the base config (--preset / --config / flags). The study's space (with --enqueue-base, the
# base's own values added: ``space_holding``) is written into best.json with the trial counts.
LR = {"type": "float", "low": 1e-4, "high": 2e-2, "log": True}
BATCH = {"type": "categorical", "choices": [2048, 4096, 8192, 16384]}
SEARCH_SPACES: dict[str, dict[str, dict[str, Any]]] = {
    "neumf": {
        "lr": LR,
        "batch_size": BATCH,
        "negatives": {"type": "int", "low": 2, "high": 10},
        "factors": {"type": "categorical", "choices": [8, 16, 32, 64]},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    },
    "mf": {
        "lr": LR,
        "batch_size": BATCH,
        "negatives": {"type": "int", "low": 2, "high": 16},
        "factors": {"type": "categorical", "choices": [16, 32, 64, 128]},
        "l2": {"type": "float", "low": 1e-7, "high": 1e-2, "log": True},
    },
}


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One value per parameter of ``space``, drawn through ``trial`` (an ``optuna.Trial``)."""
    values = {}
    for name, spec in space.items():
        if spec["type"] == "float":
            values[name] = trial.suggest_float(
                name, spec["low"], spec["high"], log=spec.get("log", False)
            )
        elif spec["type"] == "int":
            values[name] = trial.suggest_int(name, spec["low"], spec["high"])
        else:
            values[name] = trial.suggest_categorical(name, spec["choices"])
    return values


def space_holding(space: dict[str, dict[str, Any]], base: TrainConfig) -> dict[str, dict[str, Any]]:
    """``space`` stretched to hold ``base``'s own value of every searched setting.

    The base is queued as a trial (``--enqueue-base``; ``ncf run --tune`` always queues it), and
    Optuna refuses a queued value that is not one of a categorical's choices, or not > 0 on a log
    range. A preset may hold such a value (``small``: 128 factors), so a categorical gains the
    base's value as a choice and a range stretches to it; a search that queues no base keeps
    ``space`` as it is. The space is part of the study's identity: a search resumed with the same
    flags sees the same one; one resumed with another ``--enqueue-base`` is refused where that
    changes the space.

    Raises
    ------
    ValueError
        If the base's value cannot lie in a log range (<= 0), naming the setting and the fix.
    """
    out = {}
    for name, spec in space.items():
        value = getattr(base, name)
        if spec["type"] == "categorical":
            if value not in spec["choices"]:
                spec = {**spec, "choices": sorted([*spec["choices"], value])}
        elif spec.get("log") and value <= 0:
            raise ValueError(
                f"--enqueue-base: the base's {flag_name(name)} {value} cannot be tried on the "
                f"searched log range {spec['low']:g}..{spec['high']:g}; use a preset whose value "
                "is > 0 (docs/PRESETS.md) or search without --enqueue-base"
            )
        elif not spec["low"] <= value <= spec["high"]:
            spec = {**spec, "low": min(spec["low"], value), "high": max(spec["high"], value)}
        out[name] = spec
    return out


def load_validation(data: EtlData) -> EtlData:
    """``data`` with its validation split in the fields evaluation reads (``EtlData.held_out``).

    Raises
    ------
    ValueError
        If the ETL directory has no validation split.
    """
    if not data.has_valid:
        raise ValueError(
            f"{data.path}: no {VALID_DIR}/ split; {HOLDOUT_HINT} (then tune on its output)"
        )
    return data.held_out("valid")


def validation_metrics(
    model: torch.nn.Module, valid: EtlData, env: DistEnv, k: int, batch_size: int
) -> dict[str, float]:
    """HR@k / NDCG@k of ``model`` on the validation split (``load_validation``'s result)."""
    return evaluate_model(model, valid, env, k, batch_size)


@dataclasses.dataclass
class Search:
    """What every trial of one ``ncf tune`` run shares."""

    data: EtlData
    valid: EtlData
    env: DistEnv
    base: TrainConfig
    space: dict[str, dict[str, Any]]
    opts: RunOptions
    target: int  # finished (complete + pruned) trials the study should end with
    cfg: TuneConfig  # the search's resolved config (best.json's data, device, preset)


def finished(study: Any) -> list:
    """The study's complete and pruned trials."""
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))


def run_trial(trial: Any, search: Search) -> float:
    """Train one suggested config; report validation HR@k per epoch; return the best epoch's."""
    import optuna

    cfg = search.base.replace(**suggest(trial, search.space))
    cfg.check()
    trainer = Trainer(search.data, cfg, search.env, search.opts)
    best, history = -1.0, []
    hr_key, ndcg_key = metric_keys(True, cfg.topk)
    for epoch in range(cfg.epochs):
        trainer.train_epoch(epoch)
        with (
            trainer.average.applied(trainer.model) if trainer.average else contextlib.nullcontext()
        ):
            m = validation_metrics(  # the model ncf train would select: the average if any
                trainer.model, search.valid, search.env, cfg.topk, cfg.eval_batch_size
            )
        history.append({hr_key: m["hr"], ndcg_key: m["ndcg"]})
        trial.report(m["hr"], epoch)
        if m["hr"] > best:
            best = m["hr"]
            trial.set_user_attr("best_epoch", epoch)
        kill_after = os.environ.get(KILL_ENV)
        if kill_after and len(finished(trial.study)) >= int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)
        if trial.should_prune():
            raise optuna.TrialPruned()
        if should_stop(history, cfg, valid=True):  # the base's --patience ends a trial early too
            break
    return best


def is_tune_dir(out: Path) -> bool:
    """True if ``out`` is a search directory of ``ncf tune`` (its lock, study or config)."""
    own = (out / LOCK_FILE).exists() or (out / STUDY_FILE).is_file()
    return own or written_by(out / CONFIG_FILE) == "tune"


def check_out(out: Path) -> None:
    """Raise unless ``out`` is absent, empty or a search of ``ncf tune`` (resumed in place): a
    search writes config.json, best.json and trials.png into OUT, never over another's files."""
    check_replaceable(out, "tune", recognise=is_tune_dir)


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """Hold ``OUT/.tune.lock`` (released by the OS when the process dies, even by SIGKILL)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_FILE, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"{out}: another `ncf tune` is running on this study; wait for it"
            ) from None
        yield


def open_study(cfg: TuneConfig, search: Search) -> Any:
    """Create the study, or load it and check it is the same search (model, space, data)."""
    import optuna

    storage = optuna.storages.RDBStorage(cfg.storage)
    study = optuna.create_study(
        storage=storage,
        study_name=cfg.study_name,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(
            seed=search.base.seed, n_startup_trials=cfg.startup_trials
        ),
        pruner=optuna.pruners.MedianPruner(
            n_startup_trials=cfg.startup_trials, n_warmup_steps=PRUNER_WARMUP_EPOCHS
        ),
        load_if_exists=True,
    )
    identity = {
        "model": search.base.model,
        "search_space": search.space,
        "base_config": {k: v for k, v in search.base.to_dict().items() if k not in search.space},
        "data_sha256": search.data.metadata_sha256,
    }
    if not study.user_attrs:
        for key, value in identity.items():
            study.set_user_attr(key, value)
    differs = sorted(k for k, v in identity.items() if study.user_attrs.get(k) != v)
    if differs:
        raise ValueError(
            f"{cfg.out}: study {study.study_name!r} is a search with other {differs}; resume it "
            "with the same flags and data, or start another with a new --out or --study-name"
        )
    return study, storage


def recover(study: Any, storage: Any) -> list[int]:
    """Fail the trials a killed search left RUNNING and queue their settings again; their numbers."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in stale:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
    return [t.number for t in stale]


def best_config(study: Any, search: Search) -> tuple[TrainRunConfig, dict] | None:
    """The best complete trial as ``ncf train``'s config (on the search's data; ``out`` left to
    give) and the ``about`` of ``best.json``; None while no trial is complete."""
    from optuna.trial import TrialState

    counts = {
        s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,))) for s in TrialState
    }
    if not counts["complete"]:
        return None
    best = study.best_trial
    epoch = int(best.user_attrs["best_epoch"])
    hp = search.base.replace(**best.params, epochs=epoch + 1)  # up to its best epoch
    cfg = search.cfg
    config = TrainRunConfig(data=cfg.data, preset=cfg.preset, hp=hp, device=cfg.device,
                            deterministic=cfg.deterministic)  # fmt: skip
    about = {
        "tool": "ncf tune",
        "metric": f"validation hr@{search.base.topk} (best epoch of a trial)",
        "best_value": best.value,
        "best_trial": best.number,
        "best_epoch": epoch,
        "epochs_per_trial": search.base.epochs,
        "trials": {**counts, "target": search.target},
        "search_space": search.space,
        "sampler": f"TPESampler(seed={search.base.seed})",
        "pruner": f"MedianPruner(n_warmup_steps={PRUNER_WARMUP_EPOCHS})",
        "study": study.study_name,
        "data": str(search.data.path),
        "data_sha256": search.data.metadata_sha256,
    }
    return config, about


def plot_trials(study: Any, path: Path, title: str, k: int = DEFAULT_TOPK) -> None:
    """Each finished trial's value (pruned: its last reported HR) and the best so far, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState

    done = sorted(finished(study), key=lambda t: t.number)
    fig, ax = plt.subplots(figsize=(7, 4))
    for state, marker, label in (
        (TrialState.COMPLETE, "o", "complete"),
        (TrialState.PRUNED, "x", "pruned"),
    ):
        pts = [(t.number, t.value if t.value is not None else t.intermediate_values[t.last_step])
               for t in done if t.state == state and (t.value is not None or t.intermediate_values)]  # fmt: skip
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker=marker, label=label)
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    if complete:
        best = np.maximum.accumulate([t.value for t in complete])
        ax.step(
            [t.number for t in complete], best, where="post", color="tab:red", label="best so far"
        )
    ax.set_xlabel("trial")
    ax.set_ylabel(f"validation HR@{k}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    write_figure(path, fig)


def progress_line(study: Any, trial: Any, search: Search) -> str:
    """One line per finished trial: its state, value, time and settings, and the best so far."""
    value = (
        trial.value
        if trial.value is not None
        else max(trial.intermediate_values.values(), default=0)
    )
    seconds = trial.duration.total_seconds() if trial.duration else 0.0
    params = " ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items()
    )
    try:
        best = f"best {study.best_value:.4f} (trial {study.best_trial.number})"
    except ValueError:  # no complete trial yet
        best = "no complete trial yet"
    return (
        f"trial {trial.number} {trial.state.name.lower()}: valid HR@{search.base.topk} {value:.4f} "
        f"in {seconds:.1f} s, {len(trial.intermediate_values)} epochs | {best} | "
        f"{len(finished(study))}/{search.target} | {params}"
    )


def write_outputs(study: Any, search: Search, out: Path) -> None:
    """Rewrite ``best.json`` (once a trial is complete) and ``trials.png``."""
    best = best_config(study, search)
    if best is not None:
        config, about = best
        write_config(out / BEST_FILE, config, "train", about=about)
    title = f"ncf tune: {search.base.model} on {search.data.path.name}"
    plot_trials(study, out / PLOT_FILE, title, search.base.topk)


@dataclasses.dataclass
class TuneConfig(Config):
    """hyperparameter search (Optuna) on the validation split; resumable"""

    PRE_FIELDS: ClassVar[tuple[str, ...]] = ("preset",)
    data: Path | None = setting(
        None, help=f"ETL output with a validation split, {HOLDOUT_HINT} (required)"
    )
    out: Path | None = setting(None, help="search directory: study, best.json, plot (required)")
    trials: int = setting(
        20,
        help="finished (complete or pruned) trials the study ends with, earlier runs of a resumed "
        "search included",
    )
    storage: str | None = setting(None, help="Optuna storage URL (none: sqlite:///OUT/study.db)")
    study_name: str | None = setting(None, help="study in the storage (none: ncf-tune-<model>)")
    startup_trials: int = setting(
        5, help="random trials before TPE takes over, and before pruning starts"
    )
    enqueue_base: bool = flag(
        False,
        help="also try the base config's own values of the searched settings (the preset being "
        "re-chosen), as the search's next trial unless the study already tried them",
    )
    preset: str = setting(
        DEFAULT_PRESET, choices=sorted(PRESETS), help="the base config's preset (docs/PRESETS.md)"
    )
    # The base config; the searched fields (SEARCH_SPACES) keep the preset's values.
    hp: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    device: str = setting("auto", choices=DEVICES, help="auto: CUDA if available")
    threads: int = setting(0, help="CPU threads (0: all usable cores)")
    deterministic: bool = flag(False, help="bitwise-reproducible trials")

    @classmethod
    def base(cls, chosen: dict[str, Any]) -> dict[str, Any]:
        """The preset's hyperparameters (``--preset``)."""
        return {"hp": preset_values(chosen.get("preset", DEFAULT_PRESET))}

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value (a searched one included)."""
        for name in ("data", "out"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required; see `ncf tune --help`")
        if self.trials < 1 or self.startup_trials < 0 or self.threads < 0:
            raise ValueError(
                f"--trials {self.trials} / --startup-trials {self.startup_trials} / --threads "
                f"{self.threads}: need >= 1 / >= 0 / >= 0"
            )
        self.hp.check()
        if self.hp.pretrain != "none":
            raise ValueError(
                f"--pretrain {self.hp.pretrain}: `ncf tune`'s trials train NeuMF from scratch; "
                "search with --pretrain none, then `ncf train --config OUT/best.json --pretrain "
                f"{self.hp.pretrain}`"
            )
        preset = preset_config(self.preset, model=self.hp.model)
        given = [flag_name(k) for k in SEARCH_SPACES[self.hp.model]
                 if getattr(self.hp, k) != getattr(preset, k)]  # fmt: skip
        if given:
            raise ValueError(f"{' '.join(given)}: searched by `ncf tune --model {self.hp.model}` "
                             "(models/tune.py SEARCH_SPACES); drop the setting (the preset gives "
                             "--enqueue-base its value)")  # fmt: skip
        if self.enqueue_base:
            space_holding(SEARCH_SPACES[self.hp.model], self.hp)  # raises if it cannot hold it

    def resolved(self) -> TuneConfig:
        """This config with the storage and study name it runs with (no automatic value left)."""
        return self.replace(
            storage=self.storage or f"sqlite:///{self.out / STUDY_FILE}",
            study_name=self.study_name or f"ncf-tune-{self.hp.model}",
            threads=self.threads or default_threads(1),
        )


CONFIG = TuneConfig


def run(cfg: TuneConfig) -> int:
    """Run (or resume) the search ``cfg`` describes; OUT/config.json, best.json, trials.png; 0."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one progress line per trial instead
    cfg = cfg.resolved()
    check_out(cfg.out)
    with process_group(cfg.device) as env, exclusive(cfg.out):
        if env.distributed:
            raise ValueError("ncf tune runs as one process; start it without torchrun")
        configure(env.device, cfg.threads, cfg.deterministic)
        write_config(cfg.out / CONFIG_FILE, cfg, "tune")
        data = load_etl(cfg.data, env.device)
        opts = RunOptions(
            out=cfg.out, etl_dir=cfg.data, deterministic=cfg.deterministic, preset=cfg.preset
        )
        space = SEARCH_SPACES[cfg.hp.model]
        space = space_holding(space, cfg.hp) if cfg.enqueue_base else space
        search = Search(data, load_validation(data), env, cfg.hp, space, opts, cfg.trials, cfg)
        print(
            cost_line(len(data.train_users), cfg.hp, search.space, cfg.trials, cfg.threads),
            flush=True,
        )
        study = start_study(cfg, search)
        remaining = cfg.trials - len(finished(study))

        def on_trial_end(study: Any, trial: Any) -> None:
            print(progress_line(study, trial, search), flush=True)
            write_outputs(study, search, cfg.out)

        if remaining > 0:
            study.optimize(
                lambda t: run_trial(t, search), n_trials=remaining, callbacks=[on_trial_end]
            )
        write_outputs(study, search, cfg.out)
        if best_config(study, search) is None:
            raise ValueError(f"{cfg.out}: no trial completed (all pruned); run more --trials")
        print(f"best: valid HR@{cfg.hp.topk} {study.best_value:.4f} (trial {study.best_trial.number}); "
              f"train with: ncf train --config {cfg.out / BEST_FILE} --out RUN")  # fmt: skip
    return 0


def cost_line(train_rows: int, base: TrainConfig, space: dict[str, dict[str, Any]], trials: int,
              threads: int) -> str:  # fmt: skip
    """The search's worst-case cost on a CPU: every trial running all of ``base.epochs``.

    An epoch trains ``train_rows * (1 + negatives)`` samples (negatives: the middle of a searched
    range, else the base's) at ``CPU_SAMPLES_PER_S_PER_THREAD * threads`` samples/s.
    """
    neg = space.get("negatives")
    negatives = (neg["low"] + neg["high"]) / 2 if neg else base.negatives
    samples = train_rows * (1 + negatives)
    rate = CPU_SAMPLES_PER_S_PER_THREAD * max(threads, 1)
    minutes = trials * base.epochs * samples / rate / 60
    return (
        f"ncf tune: cost: {trials} trials x at most {base.epochs} epochs x {samples / 1e6:.2f}M "
        f"samples: at most {minutes:.0f} min on {threads} CPU thread(s) at ~{rate:,} samples/s "
        f"(pruning{' and --patience' if base.patience else ''} end most trials sooner; a GPU is faster)"
    )


def start_study(cfg: TuneConfig, search: Search) -> Any:
    """Open the study, requeue killed trials, queue the base (``--enqueue-base``); say what is left."""
    study, storage = open_study(cfg, search)
    retried = recover(study, storage)
    if retried:
        print(f"ncf tune: trials {retried} were cut short (killed); queued again", flush=True)
    if cfg.enqueue_base:  # the incumbent competes with what the search proposes
        base_values = {name: getattr(cfg.hp, name) for name in search.space}
        study.enqueue_trial(base_values, user_attrs={"base": cfg.preset}, skip_if_exists=True)
    remaining = cfg.trials - len(finished(study))
    print(
        f"ncf tune: {len(finished(study))}/{cfg.trials} trials done; {max(remaining, 0)} to run",
        flush=True,
    )
    return study
