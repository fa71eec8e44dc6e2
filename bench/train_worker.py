"""One measurement of ``bench/train.py``, run in a fresh process (or torchrun process group).

    python -m ncf.bench.train_worker POINT.json     # a TrainPoint (bench/train_point.py)

Modes: ``steps`` (samples/s of timed optimizer steps; precision ``dle`` times DLE's own step),
``sampling`` (an epoch's negatives, exact vs approximate) and ``fit`` (a full timed run: every
epoch trained and evaluated, as ``ncf train``). Rank 0 writes the result JSON to ``point.result``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from ncf.bench.train_data import load
from ncf.bench.train_dle import time_dle_steps
from ncf.bench.train_point import DLE_PRECISIONS, TrainPoint
from ncf.core.dllog import DLLogger
from ncf.models.distributed import DistEnv, all_reduce_sum, process_group
from ncf.models.epoch import epoch_generator, plan_epoch
from ncf.models.evaluate import evaluate_itempop
from ncf.models.presets import TrainConfig
from ncf.models.runtime import configure, default_threads
from ncf.models.sampling import PositiveSet
from ncf.models.selection import summarize
from ncf.models.trainer import RunOptions, Trainer

PROG = "python -m ncf.bench.train_worker"


def _sync(env: DistEnv) -> None:
    if env.device.type == "cuda":
        torch.cuda.synchronize(env.device)


def step_starts(num_samples: int, batch: int, count: int) -> list[int]:
    """Start offsets of ``count`` global batches in an epoch's order (wrapping round)."""
    return [(i * batch) % max(num_samples - batch, 1) for i in range(count)]


def bytes_written() -> int | None:
    """Bytes this process has passed to write-family system calls so far (None off Linux).

    ``wchar`` of ``/proc/self/io`` (all threads). gloo's TCP transport sends with ``writev``, so
    across training steps, which write nothing else, its growth is what the rank sent to the others
    (docs/FACTS.md).
    """
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    fields = dict(line.split(": ") for line in text.splitlines() if ": " in line)
    return int(fields["wchar"])


def exchanged(tr: Trainer) -> int:
    """Bytes the sharded tables' all-to-alls sent from this rank so far (0: replicated tables)."""
    return tr.model.exchange.bytes if tr.sharded else 0


def comm_per_step(tr: Trainer, start: tuple[int, int, int | None], steps: int) -> dict:
    """Bytes per step since ``start`` (all-reduce payload, all-to-all bytes, bytes written): the
    payload the trainer's DDP hook counted, what the sharded tables' all-to-alls sent and what
    this rank wrote to its sockets, each averaged over the ranks."""
    payload0, exchange0, written0 = start
    counter = tr.comm
    payload = (counter.payload_bytes - payload0) if counter is not None else 0
    written = bytes_written()
    sent = 0 if counter is None or written0 is None or written is None else written - written0
    # Ranks may differ (a collective's algorithm need not spread the traffic evenly): the mean.
    totals = torch.tensor([payload, exchanged(tr) - exchange0, sent], dtype=torch.float64)
    mean = (all_reduce_sum(totals, tr.env) / tr.env.world_size / steps).tolist()
    return {
        "grad_compression": tr.cfg.grad_compression,
        "shard_embeddings": bool(tr.sharded),
        "allreduce_mb_per_step": round(mean[0] / 1e6, 3),
        "alltoall_mb_per_step": round(mean[1] / 1e6, 3),
        "sent_mb_per_step": round(mean[2] / 1e6, 3) if written0 is not None else None,
        # the parameters DDP all-reduces (sharded tables excluded)
        "grad_params": sum(
            p.numel() for n, p in tr.model.named_parameters() if n not in tr.sharded
        ),
    }


def time_steps(tr: Trainer, warmup: int, steps: int) -> dict:
    """Plan epoch 0, run ``warmup`` then ``steps`` global batches; throughput of the timed ones,
    and the bytes each rank all-reduced and sent per step."""
    env, batch = tr.env, tr.cfg.batch_size
    gen = epoch_generator(tr.cfg.seed, 0, env.device)
    t0 = time.perf_counter()
    plan = plan_epoch(tr.data, tr.cfg.negatives, tr.cfg.negative_sampling, tr.positives, gen)
    _sync(env)
    plan_s = time.perf_counter() - t0
    n = plan.num_samples
    starts = step_starts(n, batch, warmup + steps)
    for s in starts[:warmup]:
        tr.step(plan, s, min(batch, n), gen)
    _sync(env)
    start = (tr.comm.payload_bytes if tr.comm else 0, exchanged(tr), bytes_written())
    t0 = time.perf_counter()
    for s in starts[warmup:]:
        tr.step(plan, s, min(batch, n), gen)
    _sync(env)
    seconds = time.perf_counter() - t0
    return {
        "samples_per_s": round(steps * min(batch, n) / seconds),
        "step_s": round(seconds / steps, 4),
        "epoch_plan_s": round(plan_s, 3),
        "micro_batch": -(-min(batch, n) // env.world_size // tr.micro_batches(batch)),
        **comm_per_step(tr, start, steps),
    }


def time_sampling(tr: Trainer) -> dict:
    """One epoch's training negatives (4 per positive) in both modes, and DLE's collision rate."""
    data, env = tr.data, tr.env
    t0 = time.perf_counter()
    positives = PositiveSet(data.train_users, data.train_items, data.num_users, data.num_items)
    _sync(env)
    out = {
        "positive_set_s": round(time.perf_counter() - t0, 3),
        "backend": positives.backend,
        "negatives": int(data.train_users.numel()) * tr.cfg.negatives,
    }
    for mode in ("approximate", "exact"):
        gen = epoch_generator(tr.cfg.seed, 0, env.device)
        t0 = time.perf_counter()
        plan = plan_epoch(data, tr.cfg.negatives, mode, positives if mode == "exact" else None, gen)
        _sync(env)
        out[f"{mode}_epoch_s"] = round(time.perf_counter() - t0, 3)
        users = data.train_users.repeat(tr.cfg.negatives)
        out[f"{mode}_positive_rate"] = float(
            positives.contains(users, plan.negatives).float().mean()
        )
    out["exact_over_approximate"] = round(
        out["exact_epoch_s"] / max(out["approximate_epoch_s"], 1e-9), 3
    )
    return out


def timed_fit(tr: Trainer, out: Path) -> dict:
    """Every epoch trained, evaluated and checkpointed, as ``ncf train`` does; DLE's summary."""
    log = DLLogger(out / "log.json", stdout=tr.env.is_main, enabled=tr.env.is_main)
    itempop = evaluate_itempop(tr.data, tr.cfg.topk)
    t0 = time.perf_counter()
    tr.run_epochs(log)
    wall = time.perf_counter() - t0
    log.close()
    k = tr.cfg.topk
    return {
        **summarize(tr.history, tr.cfg.threshold, k),
        "wall_s": round(wall, 2),
        f"itempop_hr@{k}": itempop["hr"],
        f"itempop_ndcg@{k}": itempop["ndcg"],
        "history": [
            {kk: h[kk] for kk in ("epoch", f"hr@{k}", f"ndcg@{k}", "loss")} for h in tr.history
        ],
    }


def build_trainer(point: TrainPoint, env: DistEnv, tmp: Path) -> Trainer:
    """Our ``Trainer`` on ``point.data`` at ``point.precision`` (runtime configured)."""
    configure(
        env.device,
        default_threads(env.local_world_size),
        deterministic=False,
        tf32=point.precision == "tf32",
    )
    data = load(point.data, env.device)
    epochs = {"epochs": point.epochs} if point.epochs else {}  # 0: TrainConfig's default
    cfg = TrainConfig(
        batch_size=point.batch,
        micro_batch=point.micro_batch,
        grad_compression=point.grad_compression,
        **epochs,
    )
    amp = point.precision in ("bf16", "amp")
    opts = RunOptions(
        out=tmp, etl_dir=Path(point.data), amp=amp, shard_embeddings=point.shard_embeddings
    )
    return Trainer(data, cfg, env, opts)


def _ours(point: TrainPoint, env: DistEnv, tmp: Path) -> dict:
    """Our step at the point's precision: steps, sampling or a timed fit."""
    tr = build_trainer(point, env, tmp)
    if env.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(env.device)
    if point.mode == "steps":
        return time_steps(tr, point.warmup, point.steps)
    if point.mode == "sampling":
        return time_sampling(tr)
    return timed_fit(tr, tmp)


def _dle(point: TrainPoint, env: DistEnv) -> dict:
    """DLE's own step: none of our runtime settings."""
    torch.set_num_threads(default_threads(env.local_world_size))
    data = load(point.data, env.device)
    mode = DLE_PRECISIONS[point.precision]
    return time_dle_steps(data, point.batch, point.warmup, point.steps, env.device, mode)


def work(point: TrainPoint) -> int:
    """Run the measurement ``point`` describes; rank 0 writes the result to ``point.result``."""
    with process_group(point.device) as env, tempfile.TemporaryDirectory() as tmp:
        if point.precision in DLE_PRECISIONS:
            res = _dle(point, env)
        else:
            res = _ours(point, env, Path(tmp))
        res.update(
            device=str(env.device),
            batch=point.batch,
            precision=point.precision,
            world_size=env.world_size,
        )
        if env.device.type == "cuda":
            res["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(env.device) / 2**30, 3)
        if env.is_main and point.result:
            Path(point.result).write_text(json.dumps(res))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ncf.bench.train_worker POINT.json``: one line and exit code 2 for a bad point."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("point", type=Path, help="TrainPoint JSON, as ncf.bench.train writes it")
    args = parser.parse_args(argv)
    try:
        point = TrainPoint.load(args.point)
    except (ValueError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return work(point)


if __name__ == "__main__":
    sys.exit(main())
