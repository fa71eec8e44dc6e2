"""``python -m ncf.bench.profile_step``: where one NeuMF training step spends its time (torch.profiler).

Builds the real ``Trainer`` on an ETL split (or ``ncf synth`` data), plans epoch 0, runs warm-up
steps, then profiles ``--steps`` global batches and tabulates the operators by self time on the
device (CUDA kernels on a GPU, CPU time otherwise), per step. Written for the GPU check: the H200
AMP step is below DLE's A100 figure and this says which operators take the time.

    python -m ncf.bench.profile_step --device cuda --precision amp --batch 1048576
    python -m ncf.bench.profile_step --scale 0.01 --batch 65536        # CPU, quick
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.bench.train_point import OUR_PRECISIONS
from ncf.core.config import Config, setting

COLUMNS = ("op", "calls_per_step", "self_ms_per_step", "share_pct", "self_cpu_ms_per_step")


@dataclass
class ProfileBench(Config):
    """The torch.profiler table of one training step's operators."""

    data: Path | None = setting(None, help="ETL output directory (default: ncf synth data)")
    scale: float = setting(1.0, help="ncf synth scale when no --data")
    device: Literal["cpu", "cuda"] = setting("cpu", help="where to train")
    precision: str = setting("fp32", choices=OUR_PRECISIONS, help="training precision")
    batch: int = setting(1 << 20, help="global batch size")
    warmup: int = setting(3, help="untimed steps first")
    steps: int = setting(3, help="profiled steps")
    top: int = setting(25, help="operators in the table")
    name: str = setting("profile_step", help="results name (<results-dir>/<name>.json)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        if self.steps < 1 or self.warmup < 0 or self.batch < 1:
            raise ValueError(
                f"--steps {self.steps} --warmup {self.warmup} --batch {self.batch}: need "
                "steps >= 1, warmup >= 0, batch >= 1"
            )


CONFIG = ProfileBench


def _self_device_us(evt) -> float:
    """Self time on the accelerator in microseconds (attribute renamed across torch versions)."""
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(evt, attr):
            return float(getattr(evt, attr))
    return 0.0


def op_table(events, steps: int, on_device: bool, top: int) -> list[dict]:
    """Rows of the ``top`` operators by self time (device or CPU), per step, with their share."""
    rows = []
    for evt in events:
        # On a GPU the kernels are listed twice: as their own (CUDA) events and as the self
        # device time of the CPU-side operator that launched them; keep the operators only.
        if on_device and getattr(evt, "device_type", None) != torch.autograd.DeviceType.CPU:
            continue
        device_us = _self_device_us(evt) if on_device else float(evt.self_cpu_time_total)
        # The profiler can report a negative self time for an operator whose children it
        # over-counted (torch 2.1 under CPU load); it is no time of its own, so it counts as 0.
        device_us = max(device_us, 0.0)
        rows.append(
            {
                "op": evt.key,
                "calls_per_step": round(evt.count / steps, 2),
                "self_ms_per_step": device_us / steps / 1e3,
                "self_cpu_ms_per_step": round(evt.self_cpu_time_total / steps / 1e3, 4),
            }
        )
    total = sum(r["self_ms_per_step"] for r in rows) or 1.0
    rows.sort(key=lambda r: -r["self_ms_per_step"])
    for r in rows:
        r["share_pct"] = round(100 * r["self_ms_per_step"] / total, 2)
        r["self_ms_per_step"] = round(r["self_ms_per_step"], 4)
    return rows[:top]


def profile(args: ProfileBench, data_path: Path) -> tuple[list[dict], dict]:
    """Profile ``args.steps`` training steps; (operator rows, step facts)."""
    from ncf.bench.train_point import TrainPoint
    from ncf.bench.train_worker import build_trainer, step_starts
    from ncf.models.distributed import process_group
    from ncf.models.epoch import epoch_generator, plan_epoch

    point = TrainPoint(
        data=str(data_path),
        device=args.device,
        precision=args.precision,
        batch=args.batch,
        mode="steps",
        warmup=args.warmup,
        steps=args.steps,
        micro_batch=0,
        epochs=0,
    )
    with process_group(args.device) as env, tempfile.TemporaryDirectory() as tmp:
        tr = build_trainer(point, env, Path(tmp))
        gen = epoch_generator(tr.cfg.seed, 0, env.device)
        plan = plan_epoch(tr.data, tr.cfg.negatives, tr.cfg.negative_sampling, tr.positives, gen)
        size = min(args.batch, plan.num_samples)
        starts = step_starts(plan.num_samples, size, args.warmup + args.steps)
        sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
        for s in starts[: args.warmup]:
            tr.step(plan, s, size, gen)
        sync()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if env.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        t0 = time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            for s in starts[args.warmup :]:
                tr.step(plan, s, size, gen)
            sync()
        seconds = time.perf_counter() - t0  # with the profiler's own overhead
        rows = op_table(prof.key_averages(), args.steps, env.device.type == "cuda", args.top)
        facts = {
            "device": str(env.device),
            "precision": args.precision,
            "batch": size,
            "profiled_step_s": round(seconds / args.steps, 4),
            "micro_batches": tr.micro_batches(size),
        }
    return rows, facts


def run(args: ProfileBench) -> Results:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    data = args.data
    if data is None:
        from ncf.bench.train_data import synthetic

        data = synthetic(args.scale)
    rows, facts = profile(args, data)
    title = (
        f"Training step profile ({facts['device']}, {facts['precision']}, batch {facts['batch']:,})"
    )
    extra = {"step": facts, "data": str(data)}
    return Results(args.name, rows, COLUMNS, title, args.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
