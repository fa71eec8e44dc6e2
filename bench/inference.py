"""``ncf bench inference``: NeuMF scoring throughput and latency in eager PyTorch, TorchScript and
ONNX Runtime, as DLE's inference tables report them.

For each backend x precision x batch size: random valid (user, item) ids, warm-up calls dropped,
then timed calls (device synchronised after each) until ``--max-iters`` or ``--max-seconds``;
reports samples/s (batch / mean latency) and mean/p90/p95/p99 latency in ms.

    python -m ncf.bench.inference                                    # CPU, ML-20m-sized random model
    python -m ncf.bench.inference --checkpoint work/train/best.pt    # a trained model
    python -m ncf.bench.inference --device cuda --batch-sizes 1024 1048576
"""

from __future__ import annotations

import copy
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import BenchError, Plot, Results
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, flag, setting
from ncf.models import checkpoint
from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving.served import ServingNeuMF

BATCH_SIZES = (1, 64, 1024, 16384, 262144, 1048576)
BACKENDS = ("eager", "torchscript", "onnx")
COLUMNS = (
    "backend",
    "precision",
    "device",
    "batch",
    "samples_per_s",
    "lat_mean_ms",
    "lat_p90_ms",
    "lat_p95_ms",
    "lat_p99_ms",
    "iters",
)
ML20M_USERS, ML20M_ITEMS = 138_493, 26_744
_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


@dataclass
class InferenceBench(Config):
    """Eager / TorchScript / ONNX Runtime scoring, batch 1..1M."""

    checkpoint: Path | None = setting(
        None,
        help="training checkpoint (best.pt); default: a randomly initialised NeuMF of "
        "--num-users x --num-items (fine for throughput)",
    )
    num_users: int = setting(ML20M_USERS, help="users of the random model")
    num_items: int = setting(ML20M_ITEMS, help="items of the random model")
    device: Literal["cpu", "cuda"] = setting("cpu", help="where to score")
    batch_sizes: list[int] = setting(default_factory=lambda: list(BATCH_SIZES), help="batch sizes")
    backends: list[str] = setting(
        default_factory=lambda: list(BACKENDS), choices=BACKENDS, help="backends to time"
    )
    precisions: list[str] = setting(
        default_factory=list,
        choices=sorted(_DTYPES),
        help="default (none given): fp32 (+ bf16 where the CPU has it) on CPU; tf32 fp32 fp16 "
        "bf16 on CUDA",
    )
    warmup: int = setting(3, help="untimed calls per point")
    max_iters: int = setting(200, help="timed calls per point, at most")
    min_iters: int = setting(5, help="timed calls per point, at least")
    max_seconds: float = setting(2.0, help="time budget per point")
    seed: int = setting(DEFAULT_SEED, help="seed of the random model and the ids")
    threads: int = setting(0, help="torch CPU threads (0: torch's default)")
    name: str = setting("inference", help="results name (<results-dir>/<name>.json)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    plot: bool = flag(True, help="write the PNG plot (--no-plot: skip it)")

    def check(self) -> None:
        _validate(self)

    def resolved(self) -> InferenceBench:
        """The precisions filled in for the device (which must be visible)."""
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
        return self.replace(precisions=self.precisions or default_precisions(self.device))


CONFIG = InferenceBench


def load_model(args: InferenceBench) -> tuple[NeuMF, str]:
    """The model to time and a description of where it came from."""
    if args.checkpoint is None:
        torch.manual_seed(args.seed)
        cfg = NeuMFConfig(num_users=args.num_users, num_items=args.num_items)
        return NeuMF(
            cfg
        ).eval(), f"random init ({args.num_users:,} users x {args.num_items:,} items)"
    model, _ = checkpoint.load_model(args.checkpoint, kinds=("neumf",))
    return model, str(args.checkpoint)


def default_precisions(device: str) -> list[str]:
    """fp32 plus the reduced precisions the device runs natively."""
    if device == "cuda":
        out = ["tf32", "fp32", "fp16"]
        return out + (["bf16"] if torch.cuda.is_bf16_supported() else [])
    flags = _cpu_flags()
    return ["fp32"] + (["bf16"] if {"avx512_bf16", "amx_bf16"} & flags else [])


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def make_runner(
    backend: str,
    scorer: ServingNeuMF,
    precision: str,
    device: torch.device,
    example: tuple[torch.Tensor, torch.Tensor],
) -> Callable:
    """A callable ``(users [B,1], items [B,1]) -> scores`` for one backend and precision.

    Reduced precisions cast the whole model (weights and activations), as inference does.
    """
    net = copy.deepcopy(scorer).to(device=device, dtype=_DTYPES[precision]).eval()
    if backend == "eager":

        def eager(u, i):
            with torch.inference_mode():
                return net(u, i)

        return eager
    if backend == "torchscript":
        with torch.no_grad():
            traced = torch.jit.trace(net, example)
        buf = io.BytesIO()
        torch.jit.save(traced, buf)  # time what Triton would load: a saved, reloaded module
        buf.seek(0)
        loaded = torch.jit.load(buf, map_location=device).eval()

        def script(u, i):
            with torch.inference_mode():
                return loaded(u, i)

        return script
    return _onnx_runner(net, precision, device, example)


def _onnx_runner(net: ServingNeuMF, precision: str, device: torch.device, example) -> Callable:
    if precision != "fp32" or device.type != "cpu":
        raise RuntimeError("ONNX Runtime is timed in fp32 on the CPU execution provider only")
    # Imported here: onnx/onnxruntime are not installed on every host (the GPU box).
    import onnxruntime as ort

    from ncf.serving.export import to_onnx

    # The exporter the export stage uses: torch.export-based where this torch has it, else the
    # TorchScript-based one (torch 2.1 in the NGC images).
    model = to_onnx(net, example)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])

    def onnx_run(u, i):
        return sess.run(None, {names.INPUT_USER: u.numpy(), names.INPUT_ITEM: i.numpy()})[0]

    return onnx_run


def time_calls(
    fn: Callable,
    sync: Callable[[], None],
    warmup: int,
    min_iters: int,
    max_iters: int,
    max_seconds: float,
) -> np.ndarray:
    """Latencies in seconds of timed calls of ``fn()`` (warm-up calls dropped).

    One warm-up call always runs; up to ``warmup`` run while they take under half of
    ``max_seconds`` (big batches stay bounded). Timed calls stop after ``max_iters``, or once
    ``max_seconds`` have passed and ``min_iters`` calls are done; ``sync`` waits for the device.
    """
    start = time.perf_counter()
    for i in range(max(warmup, 1)):
        if i and time.perf_counter() - start > max_seconds / 2:
            break
        fn()
        sync()
    lat = []
    start = time.perf_counter()
    while len(lat) < max_iters:
        t0 = time.perf_counter()
        fn()
        sync()
        lat.append(time.perf_counter() - t0)
        if len(lat) >= min_iters and time.perf_counter() - start >= max_seconds:
            break
    return np.asarray(lat)


def summarize(lat: np.ndarray, batch: int) -> dict[str, float | int]:
    """Throughput (samples/s from the mean latency) and latency statistics in ms."""
    mean = float(lat.mean())
    p90, p95, p99 = np.percentile(lat, [90, 95, 99]) * 1e3
    return {
        "samples_per_s": batch / mean,
        "lat_mean_ms": mean * 1e3,
        "lat_p90_ms": float(p90),
        "lat_p95_ms": float(p95),
        "lat_p99_ms": float(p99),
        "iters": int(lat.size),
    }


def random_ids(cfg: NeuMFConfig, batch: int, device: torch.device, seed: int):
    """Valid ids ``[batch, 1]`` int64 for every embedding row of the model."""
    gen = torch.Generator().manual_seed(seed)
    users = torch.randint(0, cfg.num_users, (batch, 1), generator=gen)
    items = torch.randint(0, cfg.num_items, (batch, 1), generator=gen)
    return users.to(device), items.to(device)


def bench_point(
    runner: Callable, cfg: NeuMFConfig, batch: int, device: torch.device, args: InferenceBench
) -> dict:
    """Time one (backend, precision, batch) point."""
    users, items = random_ids(cfg, batch, device, args.seed + batch)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    lat = time_calls(
        lambda: runner(users, items),
        sync,
        args.warmup,
        args.min_iters,
        args.max_iters,
        args.max_seconds,
    )
    return {"batch": batch, **summarize(lat, batch)}


def run_matrix(model: NeuMF, args: InferenceBench, precisions: Sequence[str]):
    """Every backend x precision x batch point; returns (rows, skipped reasons)."""
    device = torch.device(args.device)
    scorer = ServingNeuMF(model)
    example = random_ids(model.cfg, 8, device, args.seed)
    rows, skipped = [], []
    for backend in args.backends:
        for precision in precisions:
            try:
                with _matmul_precision(precision):
                    runner = make_runner(backend, scorer, precision, device, example)
            except (ImportError, RuntimeError) as exc:
                skipped.append(f"{backend}/{precision}: {str(exc).splitlines()[0]}")
                print(f"skip {skipped[-1]}", file=sys.stderr)
                continue
            for batch in args.batch_sizes:
                with _matmul_precision(precision):
                    row = bench_point(runner, model.cfg, batch, device, args)
                rows.append(
                    {"backend": backend, "precision": precision, "device": args.device, **row}
                )
                print(
                    f"{backend:12s}{precision:6s}batch {batch:>9,}: {row['samples_per_s']:>14,.0f} "
                    f"samples/s, mean {row['lat_mean_ms']:.3f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    return rows, skipped


class _matmul_precision:
    """TF32 matmuls for ``tf32`` only (so ``fp32`` on CUDA is strict IEEE fp32)."""

    def __init__(self, precision: str):
        self.tf32 = precision == "tf32"

    def __enter__(self) -> None:
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")

    def __exit__(self, *exc: object) -> None:
        torch.set_float32_matmul_precision(self.old)


def _validate(args: InferenceBench) -> None:
    bad = [b for b in args.batch_sizes if b < 1]
    if bad:
        raise ValueError(f"--batch-sizes {bad}: every batch size must be >= 1")
    if args.min_iters < 1 or args.max_iters < args.min_iters:
        raise ValueError(
            f"--min-iters {args.min_iters} / --max-iters {args.max_iters}: need 1 <= min <= max"
        )


def run(args: InferenceBench) -> Results:
    if args.threads:
        torch.set_num_threads(args.threads)
    model, source = load_model(args)
    precisions = args.precisions
    rows, skipped = run_matrix(model, args, precisions)
    if not rows:
        raise BenchError(f"no benchmark point could run: {skipped}")
    extra = {
        "model": source,
        "num_users": model.cfg.num_users,
        "num_items": model.cfg.num_items,
        "torch_threads": torch.get_num_threads(),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),  # > cores: timings are contended
        "skipped": skipped,
        "settings": {
            k: getattr(args, k) for k in ("warmup", "min_iters", "max_iters", "max_seconds")
        },
    }
    plot = Plot(
        x="batch",
        y="lat_mean_ms",
        series=("backend", "precision"),
        title=f"NeuMF inference latency vs batch ({args.device})",
        logx=True,
        logy=True,
        y2="samples_per_s",
    )
    title = f"NeuMF inference ({args.device})"
    return Results(args.name, rows, COLUMNS, title, args.results_dir, extra, plot)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
