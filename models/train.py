"""``ncf train``: NeuMF (or MF) on an ETL output directory, DLE's defaults and flags.

Single process: ``ncf train --data ETL_DIR --out RUN``. Several processes (DDP; NCCL on GPUs,
gloo on CPUs): ``torchrun --nproc_per_node=N -m ncf.cli train ...`` or
``torchrun --nproc_per_node=N -m ncf.models.train ...`` (the same flags). Writes RUN/config.json
(the resolved config: ``ncf train --config RUN/config.json`` reruns it), best.pt, last.pt,
checkpoints.json, log.json (DLLogger), metrics.json and learning_curve.png (rank 0 only).

In code (e.g. ``ncf run``): ``TrainRunConfig.from_preset("small", data=D, out=O, hp={"seed": 1})``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from ncf.core.atomic import check_replaceable, clean_stale, written_by
from ncf.core.config import Config, flag, merge, resolve, setting, write_config
from ncf.core.errors import HANDLED, report
from ncf.models import checkpoint, warm_start
from ncf.models.data import EtlData, load_etl
from ncf.models.distributed import DEVICES, DistEnv, barrier, process_group, ranks_with
from ncf.models.presets import DEFAULT_PRESET, PRESETS, TrainConfig, preset_values
from ncf.models.pretrain import TOWER_RUNS, combine, figures, tower_config
from ncf.models.progress import show_bar
from ncf.models.runtime import configure, default_threads
from ncf.models.sampling import BITMAP_FREE_FRACTION
from ncf.models.trainer import LOG_FILE, METRICS_FILE, PLOT_FILE, RunOptions, Trainer

CONFIG_FILE = "config.json"
OUTPUTS = (
    checkpoint.BEST, checkpoint.LAST, checkpoint.MANIFEST, LOG_FILE, METRICS_FILE, PLOT_FILE,
    CONFIG_FILE,
)  # fmt: skip
# What a run folder may hold: its outputs and its pretraining runs (run folders themselves).
ENTRIES = (*OUTPUTS, *TOWER_RUNS.values())
_HP_FIELDS = frozenset(f.name for f in fields(TrainConfig))


@dataclass
class TrainRunConfig(Config):
    """train NeuMF (DLE defaults; torchrun for DDP; --amp)"""

    PRE_FIELDS: ClassVar[tuple[str, ...]] = ("preset",)
    data: Path | None = setting(None, help="ETL output directory, `ncf etl --out` (required)")
    out: Path | None = setting(None, help="run directory to write (required)")
    preset: str = setting(
        DEFAULT_PRESET,
        choices=sorted(PRESETS),
        help=f"hyperparameter preset under --config and the flags ({DEFAULT_PRESET}: DLE's "
        "defaults; docs/PRESETS.md)",
    )
    hp: TrainConfig = field(default_factory=TrainConfig)  # what to learn: flat flags (--lr)
    init_from: Path | None = setting(
        None,
        metavar="CHECKPOINT",
        help="start from this run's model (RUN/best.pt): --data must be its ETL output or one "
        "made with `ncf etl --vocab-from` it; new users' and items' rows start fresh",
    )
    device: str = setting("auto", choices=DEVICES, help="auto: CUDA if available")
    amp: bool = flag(
        False, help="mixed precision: fp16 autocast + GradScaler on CUDA, bf16 autocast on CPU"
    )
    tf32: bool = flag(True, help="TF32 matmuls on GPUs that have them (--no-tf32: fp32)")
    deterministic: bool = flag(
        False, help="bitwise-reproducible run (resume gives identical results)"
    )
    resume: bool = flag(
        False,
        help="continue RUN from RUN/last.pt (from epoch 0 only while RUN holds no checkpoint; "
        "refused when best.pt exists but last.pt is missing or corrupt)",
    )
    force: bool = flag(
        False,
        help="start over in RUN, replacing its run outputs (never a folder not from ncf train)",
    )
    threads: int = setting(0, help="CPU threads per process (0: the cores / the local ranks)")
    sampling_backend: Literal["auto", "bitmap", "sorted"] = setting(
        "auto",
        help="membership check of exact negatives, same draws either way (auto: the bitmap when "
        f"it takes at most {BITMAP_FREE_FRACTION * 100:.0f} per cent of the device's free memory)",
    )
    progress: bool = flag(True, help="tqdm bar per epoch on a terminal (--no-progress: none)")
    shard_embeddings: bool = flag(
        False,
        help="several processes: each rank keeps a block of every embedding table's rows, looked "
        "up by all-to-all; the MLP stays replicated (docs/SCALING.md). Same result as without",
    )

    @classmethod
    def base(cls, chosen: dict[str, Any]) -> dict[str, Any]:
        """The preset's hyperparameters (``--preset``)."""
        return {"hp": preset_values(chosen.get("preset", DEFAULT_PRESET))}

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> TrainRunConfig:
        """As ``Config.from_dict``; hyperparameters may also be given flat (``{"lr": 0.1}``, as
        ``ncf tune`` wrote them in format ``ncf-train-config/1``), over ``values["hp"]``."""
        flat = {k: v for k, v in values.items() if k in _HP_FIELDS}
        rest = {k: v for k, v in values.items() if k not in _HP_FIELDS}
        if flat:
            hp = rest.get("hp", {})
            rest["hp"] = merge(hp.to_dict() if isinstance(hp, Config) else hp, flat)
        return super().from_dict(rest, where)

    @classmethod
    def from_preset(cls, preset: str = DEFAULT_PRESET, **values: Any) -> TrainRunConfig:
        """The config ``ncf train --preset PRESET`` plus ``values`` resolves to (unchecked).

        ``values`` are fields (``data=``, ``out=``, ``amp=``), hyperparameters flat (``epochs=``)
        or as ``hp={...}``: e.g. ``from_preset("small", data=d, out=o, seed=1, epochs=2)``.
        """
        return cls.from_dict({**cls.base({"preset": preset}), "preset": preset, **values})

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value."""
        for name in ("data", "out"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required; see `ncf train --help`")
        if self.threads < 0:
            raise ValueError(f"--threads {self.threads}: must be >= 0 (0: automatic)")
        if self.init_from is not None and self.hp.pretrain != "none":
            raise ValueError(
                f"--init-from {self.init_from} and --pretrain {self.hp.pretrain} both choose the "
                "starting weights: pass one of them"
            )
        if self.shard_embeddings and self.hp.ema_epochs > 0:
            raise ValueError(
                f"--ema-epochs {self.hp.ema_epochs} with --shard-embeddings: the average of sharded "
                "tables is not built; pass one of them"
            )
        self.hp.check()


CONFIG = TrainRunConfig


def is_run_dir(out: Path) -> bool:
    """True if ``out`` is a run folder of ``ncf train``: it holds ``checkpoints.json`` or a
    ``config.json`` of stage train (written first, before any checkpoint)."""
    return (out / checkpoint.MANIFEST).is_file() or written_by(out / CONFIG_FILE) == "train"


def _facts(out: Path, resume: bool) -> list[bool]:
    """This rank's view of ``out``: [foreign (not absent, empty or a run folder), holds outputs,
    holds a checkpoint, holds a last.pt to resume from (looked at only for ``resume``)]."""
    empty = out.is_dir() and not out.is_symlink() and not any(out.iterdir())
    foreign = out.exists() and not empty and not (out.is_dir() and is_run_dir(out))
    existing = not foreign and any((out / name).exists() for name in ENTRIES)
    finished = not foreign and any(
        (out / name).exists() for name in (checkpoint.BEST, checkpoint.LAST)
    )
    last_ok = resume and finished and checkpoint.resumable(out / checkpoint.LAST) is None
    return [foreign, existing, finished, last_ok]


def prepare_out(out: Path, resume: bool, force: bool, env: DistEnv) -> bool:
    """Check ``out`` (all ranks), clear it if starting over (rank 0); True if resuming from last.pt.

    ``--force`` clears only a run folder's own outputs (``OUTPUTS``); a folder ``ncf train`` did
    not write is refused either way. ``--resume`` never discards a finished epoch: a run with a
    checkpoint but no usable ``last.pt`` is refused (``best.pt`` holds no optimizer or RNG state
    to continue from). The ranks decide together: on several nodes ``out`` may be one shared
    directory or one per node, and every rank must take the same branch (or the collectives that
    follow would hang).
    """
    foreign, have_run, finished, have_last = ranks_with(_facts(out, resume), env)
    if foreign:
        check_replaceable(out, "train", recognise=is_run_dir)  # raises, naming what is there
        raise FileExistsError(f"{out} is not a run folder of `ncf train` on another node")
    if have_run and not (resume or force):
        found = ", ".join(n for n in ENTRIES if (out / n).exists()) or "on another node"
        raise FileExistsError(
            f"{out} already holds a run ({found}); pass --resume to continue it or --force to "
            "start over"
        )
    if resume and 0 < have_last < env.world_size:
        raise ValueError(
            f"--resume: {out / checkpoint.LAST} is seen by {have_last} of {env.world_size} ranks; "
            "on several nodes --out must be a directory every node shares (e.g. NFS) to resume"
        )
    if resume and not force and finished and not have_last:
        raise ValueError(_no_last_message(out))
    resuming = resume and have_last == env.world_size
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        _clear(out, keep_outputs=resuming, keep_towers=resume)
        if resume and not resuming:
            print(
                f"ncf train: no {out / checkpoint.LAST} yet; starting from epoch 0", file=sys.stderr
            )
    barrier(env)
    return resuming


def _clear(out: Path, keep_outputs: bool, keep_towers: bool) -> None:
    """Remove stale temp files; unless kept, the run's outputs (--force, or --resume of a run
    killed before its first epoch) and its pretraining run folders (--force)."""
    for name in OUTPUTS:
        clean_stale(out / name)  # temp files of a writer killed mid-write
        if not keep_outputs and (out / name).exists():
            (out / name).unlink()
    for name in () if keep_towers else TOWER_RUNS.values():
        if (out / name).is_dir() and is_run_dir(out / name):
            _clear(out / name, keep_outputs=False, keep_towers=False)
            if not any((out / name).iterdir()):  # never a file ncf train did not write
                (out / name).rmdir()


def _no_last_message(out: Path) -> str:
    """Why ``--resume`` refuses a run with a checkpoint but no usable last.pt, and what to do."""
    last, best = out / checkpoint.LAST, out / checkpoint.BEST
    why = checkpoint.resumable(last) or "missing"
    why = f"{last} is missing" if why == "missing" else why.split("; ")[0]
    if best.exists():
        try:
            epoch = checkpoint.read_manifest(out).get(checkpoint.BEST, {}).get("epoch")
        except ValueError:  # an unreadable manifest: the epoch is not needed for the message
            epoch = None
        held = f" (epoch {epoch})" if epoch is not None else ""
        why += f", and {best}{held} holds no optimizer or RNG state to continue from"
    return (
        f"--resume: {why}; nothing was changed: pass --force to start over (replaces best.pt "
        "and the logs), or train into a new --out"
    )


def run_options(cfg: TrainRunConfig, env: DistEnv) -> RunOptions:
    """How this process runs the trainer (the bar only on rank 0's terminal)."""
    return RunOptions(
        out=cfg.out,
        etl_dir=cfg.data,
        amp=cfg.amp,
        deterministic=cfg.deterministic,
        progress=show_bar(cfg.progress, sys.stderr.isatty(), env.is_main),
        preset=cfg.preset,
        sampling_backend=cfg.sampling_backend,
        shard_embeddings=cfg.shard_embeddings,
    )


def run(cfg: TrainRunConfig) -> int:
    """Train as ``cfg`` says into ``cfg.out`` (every rank); 0 on success."""
    with process_group(cfg.device) as env:  # torn down whatever happens
        threads = cfg.threads or default_threads(env.local_world_size)
        configure(env.device, threads, cfg.deterministic, cfg.tf32)
        initial = None  # the checkpoint of --init-from, checked before the output is touched
        if cfg.init_from is not None:
            initial = warm_start.check_start(cfg.init_from, cfg.data, cfg.hp.model)
        resuming = prepare_out(cfg.out, cfg.resume, cfg.force, env)
        if env.is_main:  # the values used: automatic threads resolved
            write_config(cfg.out / CONFIG_FILE, cfg.replace(threads=threads), "train")
        data, opts, start = load_etl(cfg.data, env.device), run_options(cfg, env), None
        if cfg.hp.pretrain != "none":
            opts.pretrain, start = pretrain(cfg.replace(threads=threads), data, env, resuming)
        trainer = Trainer(data, cfg.hp, env, opts)
        if initial is not None:  # a resumed run records it too, and continues from last.pt
            weights, opts.init_from = warm_start.start_from(
                cfg.init_from, initial, data, trainer.full_state()
            )
            start, initial = None if resuming else weights, None
        if resuming:
            trainer.resume_from(cfg.out / checkpoint.LAST)
        elif start is not None:
            trainer.model.load_state_dict(start)  # in place: the optimizer holds these tensors
        trainer.fit()
    return 0


def pretrain(
    cfg: TrainRunConfig, data: EtlData, env: DistEnv, resuming: bool
) -> tuple[dict, dict | None]:
    """``--pretrain gmf-mlp``: each tower's run into ``RUN/pretrain-<tower>`` (a run folder of
    its own: ``--resume`` continues it), then NeuMF's starting weights from their best epochs.

    Returns the towers' figures and the weights; when NeuMF itself resumes, the towers finished
    before it began: their figures only, and None.
    """
    states = {}
    for tower, name in () if resuming else TOWER_RUNS.items():
        sub = cfg.replace(out=cfg.out / name, hp=tower_config(cfg.hp, tower))
        tower_resuming = prepare_out(sub.out, cfg.resume, cfg.force, env)
        if env.is_main:
            write_config(sub.out / CONFIG_FILE, sub, "train")
        trainer = Trainer(data, sub.hp, env, run_options(sub, env))
        if tower_resuming:
            trainer.resume_from(sub.out / checkpoint.LAST)
        trainer.fit()
        barrier(env)  # rank 0's best.pt is written
        states[tower] = checkpoint.load(sub.out / checkpoint.BEST, map_location=env.device)
    runs = {t: figures(cfg.out / name, cfg.hp.topk) for t, name in TOWER_RUNS.items()}
    about = {"mode": cfg.hp.pretrain, "alpha": cfg.hp.pretrain_alpha, "runs": runs}
    if resuming:
        return about, None
    return about, combine(states["gmf"]["model"], states["mlp"]["model"], cfg.hp.pretrain_alpha)


def main(argv: list[str] | None = None) -> int:
    """``python -m ncf.models.train`` (e.g. under torchrun) with the ``ncf train`` flags."""
    argv = sys.argv[1:] if argv is None else argv
    cfg = None
    try:
        cfg = resolve(TrainRunConfig, argv, "train", prog="ncf.models.train")
        return run(cfg)
    except HANDLED as exc:  # the error boundary of ncf.core.errors (one line, exit 2 or 1)
        return report("ncf train", exc, cfg)


if __name__ == "__main__":
    sys.exit(main())
