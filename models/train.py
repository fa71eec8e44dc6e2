"""``ncf train``: NeuMF on an ETL output directory, DLE's defaults and flags.

Single process: ``ncf train --data ETL_DIR --out RUN``. Several processes (DDP; NCCL on GPUs,
gloo on CPUs): ``torchrun --nproc_per_node=N -m ncf.cli train ...`` or
``torchrun --nproc_per_node=N -m ncf.models.train ...``. Writes RUN/best.pt, last.pt,
checkpoints.json, log.json (DLLogger), metrics.json and learning_curve.png (rank 0 only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ncf.core.atomic import clean_stale
from ncf.core.dllog import DLLogger
from ncf.models import checkpoint, presets
from ncf.models.data import load_etl
from ncf.models.distributed import DEVICES, DistEnv, barrier, process_group, ranks_with
from ncf.models.evaluate import evaluate_itempop
from ncf.models.fit import (
    LOG_FILE,
    METRICS_FILE,
    PLOT_FILE,
    declare_metrics,
    protocol,
    run_epochs,
    write_outputs,
)
from ncf.models.progress import show_bar
from ncf.models.runtime import configure, default_threads
from ncf.models.trainer import RunOptions, Trainer

OUTPUTS = (checkpoint.BEST, checkpoint.LAST, checkpoint.MANIFEST, LOG_FILE, METRICS_FILE, PLOT_FILE)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=Path, required=True, help="ETL output directory (`ncf etl --out`)"
    )
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    presets.add_arguments(p)
    p.add_argument(
        "--device", default="auto", choices=DEVICES, help="default: %(default)s (CUDA if available)"
    )
    p.add_argument(
        "--amp",
        action="store_true",
        help="mixed precision: fp16 autocast + GradScaler on CUDA, bf16 autocast on CPU",
    )
    p.add_argument(
        "--no-tf32", dest="tf32", action="store_false", help="keep fp32 matmuls on GPUs with TF32"
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="bitwise-reproducible run (resume gives identical results)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue RUN from RUN/last.pt (start fresh if there is none)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing run in --out")
    p.add_argument(
        "--threads", type=int, help="CPU threads per process (default: cores / local ranks)"
    )
    p.add_argument(
        "--sampling-backend",
        default="auto",
        choices=("auto", "bitmap", "sorted"),
        help="membership check of exact negatives (default: bitmap when <= 1 GiB)",
    )
    p.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no tqdm bar (default: bar on a terminal)",
    )


def prepare_out(out: Path, resume: bool, force: bool, env: DistEnv) -> bool:
    """Check ``out`` (all ranks), clear it if starting over (rank 0); True if resuming from last.pt.

    The ranks decide together: on several nodes ``out`` may be one shared directory or one per
    node, and every rank must take the same branch (or the collectives that follow would hang).
    """
    existing = [name for name in OUTPUTS if (out / name).exists()]
    have_run, have_last = ranks_with([bool(existing), (out / checkpoint.LAST).exists()], env)
    if have_run and not (resume or force):
        found = ", ".join(existing) if existing else "on another node"
        raise FileExistsError(
            f"{out} already holds a run ({found}); pass --resume to continue it or --force to "
            "start over"
        )
    if resume and 0 < have_last < env.world_size:
        raise ValueError(
            f"--resume: {out / checkpoint.LAST} is seen by {have_last} of {env.world_size} ranks; "
            "on several nodes --out must be a directory every node shares (e.g. NFS) to resume"
        )
    resuming = resume and have_last == env.world_size
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            clean_stale(out / name)  # temp files of a writer killed mid-write
            if not resuming and (out / name).exists():
                (out / name).unlink()  # --force, or --resume of a run killed before its first epoch
        if resume and not resuming:
            print(
                f"ncf train: no {out / checkpoint.LAST} yet; starting from epoch 0", file=sys.stderr
            )
    barrier(env)
    return resuming


def run_info(args: argparse.Namespace, env: DistEnv, trainer: Trainer) -> dict:
    """Facts about the run logged as PARAMETERs and saved in metrics.json."""
    data = trainer.data
    return {
        "device": str(env.device),
        "world_size": env.world_size,
        "local_world_size": env.local_world_size,  # processes on this (rank 0's) node
        "threads": torch.get_num_threads(),  # CPU threads per process
        "amp": args.amp,
        "deterministic": args.deterministic,
        "data": str(args.data),
        "train_rows": int(data.train_users.numel()),
        "test_users": int(data.test_users.numel()),
        **({"valid_users": int(data.valid_users.numel())} if data.has_valid else {}),
        "protocol": protocol(trainer),
        "eval_negatives": int(data.eval_negatives.shape[1]),
        "sampling_backend": getattr(trainer.positives, "backend", None),
    }


def train(args: argparse.Namespace, cfg: presets.TrainConfig, env: DistEnv) -> None:
    """Build the trainer (resuming if asked), train, and write the run directory."""
    resuming = prepare_out(args.out, args.resume, args.force, env)
    data = load_etl(args.data, env.device)
    opts = RunOptions(
        out=args.out,
        etl_dir=args.data,
        amp=args.amp,
        deterministic=args.deterministic,
        progress=show_bar(args.progress, sys.stderr.isatty(), env.is_main),
        preset=args.preset,
        sampling_backend=args.sampling_backend,
    )
    trainer = Trainer(data, cfg, env, opts)
    if resuming:
        trainer.resume_from(args.out / checkpoint.LAST)
    info = run_info(args, env, trainer)
    k = cfg.topk
    with DLLogger(args.out / LOG_FILE, stdout=True, enabled=env.is_main) as log:
        declare_metrics(log, k, data.has_valid)
        params = {
            "preset": args.preset,
            **cfg.to_dict(),
            **info,
            "resumed_at_epoch": trainer.start_epoch,
        }
        log.log(step="PARAMETER", data=params)
        itempop = evaluate_itempop(data, k)  # no parameters to select: scored on test directly
        pops = {f"itempop_hr@{k}": itempop["hr"], f"itempop_ndcg@{k}": itempop["ndcg"]}
        valid_pop = evaluate_itempop(data.held_out("valid"), k) if data.has_valid else None
        if valid_pop is not None:
            pops.update(
                {
                    f"itempop_valid_hr@{k}": valid_pop["hr"],
                    f"itempop_valid_ndcg@{k}": valid_pop["ndcg"],
                }
            )
        log.log(step="PARAMETER", data=pops)
        run_epochs(trainer, log)
        write_outputs(trainer, log, itempop, info, valid_pop)


def run(args: argparse.Namespace) -> int:
    cfg = presets.resolve(args.preset, vars(args))
    with process_group(args.device) as env:
        threads = args.threads or default_threads(env.local_world_size)
        configure(env.device, threads, args.deterministic, args.tf32)
        train(args, cfg, env)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ncf.models.train`` (e.g. under torchrun) with the ``ncf train`` flags."""
    parser = argparse.ArgumentParser(prog="ncf.models.train", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"ncf train: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
