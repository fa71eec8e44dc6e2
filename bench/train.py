"""``ncf bench train``: NeuMF training throughput and memory, one fresh process group per point.

Each point (global batch x precision x processes x gradient compression) runs in its own
subprocess (``torchrun`` with gloo for several CPU processes), draws epoch 0's exact negatives and
order, runs warm-up steps and then times optimizer steps of the real ``Trainer``; the parent
samples the peak RSS of the whole process tree. Beside the step time, each point records the bytes
a rank all-reduces per step (the payload the trainer's DDP hook counts, ``ncf.models.comm``) and
the bytes it sent to the other ranks (what it wrote to its sockets: ``sent_mb_per_step``). Also times an epoch's negatives in exact vs approximate mode, and optionally a full
timed run (``--epochs-run N``: train + evaluate every epoch, as ``ncf train`` does).

    python -m ncf.bench.train --scale 0.1                  # quick, CPU
    python -m ncf.bench.train                              # full-scale synthetic ML-20m, CPU
    python -m ncf.bench.train --device cuda --precisions fp32 tf32 amp --procs 1 --epochs-run 30
    python -m ncf.bench.train --procs 1 2 4 --grad-compressions none fp16   # bytes per step
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR, PeakRSS
from ncf.bench.entry import BenchError, Results
from ncf.bench.train_point import DLE_PRECISIONS, OUR_PRECISIONS, TrainPoint
from ncf.core import textfile
from ncf.core.config import Config, flag, setting
from ncf.core.names import GRAD_COMPRESSIONS

COLUMNS = (
    "device",
    "procs",
    "batch",
    "precision",
    "grad_compression",
    "shard_embeddings",
    "samples_per_s",
    "step_s",
    "allreduce_mb_per_step",
    "alltoall_mb_per_step",
    "sent_mb_per_step",
    "peak_rss_gib",
    "peak_gpu_gib",
    "micro_batch",
    "loadavg_1m",
)
# The timed run (--epochs-run): DLE's summary figures beside ItemPop on the same split.
RUN_COLUMNS = (
    "device",
    "batch",
    "precision",
    "epochs_run",
    "time_to_train",
    "mean_train_throughput",
    "best_accuracy",
    "itempop_hr@10",
    "best_ndcg@10",
    "itempop_ndcg@10",
    "best_epoch",
    "peak_gpu_gib",
    "peak_rss_gib",
)


@dataclass
class TrainBench(Config):
    """Training throughput and memory per batch size and precision."""

    data: Path | None = setting(
        None, help="ETL output directory (default: ncf synth data at --scale)"
    )
    scale: float = setting(1.0, help="ncf synth scale when no --data (1.0 = ML-20m)")
    device: Literal["cpu", "cuda"] = setting("cpu", help="where to train")
    batch_sizes: list[int] = setting(
        default_factory=lambda: [1 << 20, 1 << 16], help="global batches"
    )
    precisions: list[str] = setting(
        default_factory=list,
        choices=OUR_PRECISIONS,
        help="fp32, bf16 (CPU autocast), tf32, amp (CUDA fp16 autocast); default (none given): "
        "fp32 bf16 on CPU, fp32 tf32 amp on CUDA",
    )
    dle_baseline: bool = flag(
        False,
        help="also time DLE's own step (1 process) at each batch size: precision 'dle' (fp32), "
        "and on CUDA 'dle-tf32' and 'dle-amp'",
    )
    procs: list[int] = setting(default_factory=lambda: [1, 2], help="process counts (gloo on CPU)")
    grad_compressions: list[str] = setting(
        default_factory=lambda: ["none"],
        choices=GRAD_COMPRESSIONS,
        help="what DDP all-reduces at each point of several processes (`ncf train "
        "--grad-compression`); one process has no all-reduce and runs none only",
    )
    shard_embeddings: bool = flag(
        False,
        help="also time each point of several processes with the tables sharded by rows (`ncf "
        "train --shard-embeddings`): the bytes its all-to-alls send per step",
    )
    steps: int = setting(3, help="timed optimizer steps per point")
    warmup: int = setting(1, help="untimed steps first")
    micro_batch: int = setting(0, help="per-rank micro-batch cap (0 = trainer default)")
    no_steps: bool = setting(
        False,
        action="store_true",
        help="skip the step-throughput points and the sampling timing (only --epochs-run)",
    )
    epochs_run: int = setting(0, help="also time a full run of N epochs (1 process)")
    run_precision: str = setting("", help="precision of the timed run (default: the last one)")
    name: str = setting("train", help="results name (<results-dir>/<name>.json)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    preset_check: Path | None = setting(
        None,
        metavar="ETL_DIR",
        help="instead: train --preset on this ETL split for each --seeds (model vs ItemPop)",
    )
    preset: str = setting("small", help="preset of --preset-check")
    seeds: list[int] = setting(default_factory=lambda: [1, 2, 3], help="seeds of --preset-check")
    baseline_preset: str = setting(
        "",
        help="--preset-check: also train this preset per seed as the MF baseline (e.g. mf-small)",
    )
    threads: int = setting(
        0, help="--preset-check: CPU threads of each run (`ncf train --threads`; 0: all cores)"
    )
    peers: str = setting(
        "",
        help="--preset-check: results name of `ncf bench peers` on the same ETL (e.g. "
        "peers-small): RecBole's NeuMF per seed beside ours, and a paired bootstrap over users",
    )

    def resolved(self) -> TrainBench:
        """The precisions filled in for the device, the timed run's precision from them."""
        precisions = self.precisions or (
            ["fp32", "bf16"] if self.device == "cpu" else ["fp32", "tf32", "amp"]
        )
        run_precision = self.run_precision or precisions[-1]
        return self.replace(precisions=precisions, run_precision=run_precision)


CONFIG = TrainBench


def _launch(point: TrainPoint, procs: int) -> tuple[dict, float]:
    """Run one worker (under torchrun for several processes); its result and the tree's peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        point = dataclasses.replace(point, result=str(Path(tmp) / "result.json"))
        worker = ["-m", "ncf.bench.train_worker", str(point.save(Path(tmp) / "point.json"))]
        if procs > 1:
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={procs}",
                *worker,
            ]
        else:
            cmd = [sys.executable, *worker]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with PeakRSS(interval=0.05) as rss:
            proc = subprocess.run(cmd, env=env, check=False)
        if proc.returncode != 0:
            raise BenchError(f"benchmark worker failed (exit {proc.returncode}): {shlex.join(cmd)}")
        result = textfile.read_json(point.result)
        # 1-minute load average when the point ended: ~2 = this benchmark alone on a 2-core CPU;
        # more means other processes shared the cores and the figure is pessimistic.
        result["loadavg_1m"] = round(os.getloadavg()[0], 2)
        return result, rss.peak_gib


def dle_precisions(device: str) -> list[str]:
    """DLE's step in the modes DLE reports on ``device`` (its GPU tables: TF32 and AMP)."""
    return list(DLE_PRECISIONS) if device == "cuda" else ["dle"]


def _point(args: TrainBench, data: Path, **fields: object) -> TrainPoint:
    """A point on ``data`` with the command's device, steps and micro-batch, plus ``fields``."""
    common = {"warmup": args.warmup, "steps": args.steps, "micro_batch": args.micro_batch}
    return TrainPoint(data=str(data), device=args.device, **{"epochs": 0, **common, **fields})


def _grid(args: TrainBench, precisions: list[str]) -> Iterator[tuple[int, int, str, str, bool]]:
    """(processes, global batch, precision, compression, sharded) of every step point, in run
    order."""
    for procs in args.procs:
        compressions = args.grad_compressions if procs > 1 else ["none"]  # 1: no all-reduce
        shards = [False, True] if args.shard_embeddings and procs > 1 else [False]
        for batch in args.batch_sizes:
            if args.dle_baseline and procs == 1:
                yield from ((procs, batch, p, "none", False) for p in dle_precisions(args.device))
            for precision in precisions:
                yield from ((procs, batch, precision, c, s) for c in compressions for s in shards)


def _step_points(args: TrainBench, data: Path, precisions: list[str]) -> list[dict]:
    """Samples/s and bytes per step of each point of the grid, each in fresh processes."""
    rows = []
    for procs, batch, precision, compression, shard in _grid(args, precisions):
        point = _point(
            args, data, mode="steps", batch=batch, precision=precision,
            grad_compression=compression, shard_embeddings=shard,
        )  # fmt: skip
        res, peak = _launch(point, procs)
        rows.append({**res, "procs": procs, "peak_rss_gib": round(peak, 3)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def run(args: TrainBench) -> Results:
    if args.preset_check:
        from ncf.bench.train_preset import check_preset

        name = args.name if args.name != "train" else f"train-{args.preset}"
        return check_preset(
            args.preset_check,
            args.preset,
            args.seeds,
            name,
            args.results_dir,
            baseline=args.baseline_preset or None,
            peers=args.peers,
            extra=["--threads", str(args.threads)] if args.threads else None,
        )
    precisions = args.precisions
    data = args.data
    if data is None:
        from ncf.bench.train_data import synthetic

        t0 = time.perf_counter()
        data = synthetic(args.scale)
        print(f"synthetic data {data} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows: list[dict] = []
    extra: dict = {"data": str(data), "scale": None if args.data else args.scale}
    batch = args.batch_sizes[0]
    if not args.no_steps:
        rows = _step_points(args, data, precisions)
        point = _point(args, data, mode="sampling", batch=batch, precision="fp32")
        extra["sampling"], _ = _launch(point, 1)
    if args.epochs_run:
        precision = args.run_precision
        point = _point(
            args, data, mode="fit", batch=batch, precision=precision, epochs=args.epochs_run
        )
        timed, peak = _launch(point, 1)
        extra["timed_run"] = {**timed, "peak_rss_gib": round(peak, 3)}
        print(json.dumps(extra["timed_run"]), file=sys.stderr, flush=True)
    columns, title = COLUMNS, f"NeuMF training throughput ({args.device})"
    if not rows and "timed_run" in extra:  # --no-steps: the table is the timed run
        rows = [{k: v for k, v in extra["timed_run"].items() if k != "history"}]
        columns, title = RUN_COLUMNS, f"NeuMF {args.epochs_run}-epoch timed run ({args.device})"
    return Results(args.name, rows, columns, title, args.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
