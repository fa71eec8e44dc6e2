"""``ncf bench train``: NeuMF training throughput and memory, one fresh process group per point.

Each point (global batch x precision x processes) runs in its own subprocess (``torchrun`` with
gloo for 2 CPU processes), draws epoch 0's exact negatives and order, runs warm-up steps and then
times optimizer steps of the real ``Trainer``; the parent samples the peak RSS of the whole
process tree. Also times an epoch's negatives in exact vs approximate mode, and optionally a full
timed run (``--epochs-run N``: train + evaluate every epoch, as ``ncf train`` does).

    python -m ncf.bench.train --scale 0.1                  # quick, CPU
    python -m ncf.bench.train                              # full-scale synthetic ML-20m, CPU
    python -m ncf.bench.train --device cuda --precisions fp32 tf32 amp --procs 1 --epochs-run 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR, PeakRSS
from ncf.bench.entry import BenchError, Results
from ncf.bench.train_point import DLE_PRECISIONS, OUR_PRECISIONS, TrainPoint

COLUMNS = (
    "device",
    "procs",
    "batch",
    "precision",
    "samples_per_s",
    "step_s",
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=Path, help="ETL output directory (default: ncf synth data at --scale)"
    )
    p.add_argument(
        "--scale", type=float, default=1.0, help="ncf synth scale when no --data (1.0 = ML-20m)"
    )
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1 << 20, 1 << 16])
    p.add_argument(
        "--precisions",
        nargs="+",
        default=None,
        choices=OUR_PRECISIONS,
        help="fp32, bf16 (CPU autocast), tf32, amp (CUDA fp16 autocast); default: fp32 bf16 on "
        "CPU, fp32 tf32 amp on CUDA",
    )
    p.add_argument(
        "--dle-baseline",
        action="store_true",
        help="also time DLE's own step (1 process) at each batch size: precision 'dle' (fp32), "
        "and on CUDA 'dle-tf32' and 'dle-amp'",
    )
    p.add_argument(
        "--procs", type=int, nargs="+", default=[1, 2], help="process counts (gloo on CPU)"
    )
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per point")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument(
        "--micro-batch", type=int, default=0, help="per-rank micro-batch cap (0 = trainer default)"
    )
    p.add_argument(
        "--no-steps",
        dest="steps_points",
        action="store_false",
        help="skip the step-throughput points and the sampling timing (only --epochs-run)",
    )
    p.add_argument(
        "--epochs-run", type=int, default=0, help="also time a full run of N epochs (1 process)"
    )
    p.add_argument(
        "--run-precision", default=None, help="precision of the timed run (default: the last one)"
    )
    p.add_argument("--name", default="train", help="results name (bench/results/<name>.json)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument(
        "--preset-check",
        type=Path,
        metavar="ETL_DIR",
        help="instead: train --preset on this ETL split for each --seeds (model vs ItemPop)",
    )
    p.add_argument(
        "--preset", default="small", help="preset of --preset-check (default: %(default)s)"
    )
    p.add_argument(
        "--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds of --preset-check"
    )
    p.add_argument(
        "--baseline-preset",
        help="--preset-check: also train this preset per seed as the MF baseline (e.g. mf-small)",
    )


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
        result = json.loads(Path(point.result).read_text())
        # 1-minute load average when the point ended: ~2 = this benchmark alone on a 2-core CPU;
        # more means other processes shared the cores and the figure is pessimistic.
        result["loadavg_1m"] = round(os.getloadavg()[0], 2)
        return result, rss.peak_gib


def dle_precisions(device: str) -> list[str]:
    """DLE's step in the modes DLE reports on ``device`` (its GPU tables: TF32 and AMP)."""
    return list(DLE_PRECISIONS) if device == "cuda" else ["dle"]


def _point(args: argparse.Namespace, data: Path, **fields: object) -> TrainPoint:
    """A point on ``data`` with the command's device, steps and micro-batch, plus ``fields``."""
    common = {"warmup": args.warmup, "steps": args.steps, "micro_batch": args.micro_batch}
    return TrainPoint(data=str(data), device=args.device, **{"epochs": 0, **common, **fields})


def _step_points(args: argparse.Namespace, data: Path, precisions: list[str]) -> list[dict]:
    """Samples/s of each (processes, global batch, precision) point, each in fresh processes."""
    rows = []
    for procs in args.procs:
        for batch in args.batch_sizes:
            baseline = dle_precisions(args.device) if args.dle_baseline and procs == 1 else []
            for precision in baseline + precisions:
                point = _point(args, data, mode="steps", batch=batch, precision=precision)
                res, peak = _launch(point, procs)
                rows.append({**res, "procs": procs, "peak_rss_gib": round(peak, 3)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def run(args: argparse.Namespace) -> Results:
    if args.preset_check:
        from ncf.bench.train_preset import check_preset

        name = args.name if args.name != "train" else f"train-{args.preset}"
        return check_preset(
            args.preset_check,
            args.preset,
            args.seeds,
            name,
            args.results_dir,
            baseline=args.baseline_preset,
        )
    precisions = args.precisions or (
        ["fp32", "bf16"] if args.device == "cpu" else ["fp32", "tf32", "amp"]
    )
    data = args.data
    if data is None:
        from ncf.bench.train_data import synthetic

        t0 = time.perf_counter()
        data = synthetic(args.scale)
        print(f"synthetic data {data} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows: list[dict] = []
    extra: dict = {"data": str(data), "scale": None if args.data else args.scale}
    batch = args.batch_sizes[0]
    if args.steps_points:
        rows = _step_points(args, data, precisions)
        point = _point(args, data, mode="sampling", batch=batch, precision="fp32")
        extra["sampling"], _ = _launch(point, 1)
    if args.epochs_run:
        precision = args.run_precision or precisions[-1]
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
