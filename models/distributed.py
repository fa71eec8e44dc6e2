"""torchrun environment, process group setup/teardown, all-reduce helpers and runtime knobs.

``torchrun --nproc_per_node=N`` sets RANK, WORLD_SIZE and LOCAL_RANK; without them this is a
single process. NCCL on CUDA, gloo on CPU. The process group is always destroyed (try/finally).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {name}={raw!r} is not an integer (set by torchrun)"
        ) from None


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> this rank's GPU if CUDA is available, else the CPU."""
    if name not in DEVICES:
        raise ValueError(f"--device {name!r}: use one of {DEVICES}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is visible to torch; use --device cpu")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


@contextlib.contextmanager
def process_group(device_name: str = "auto") -> Iterator[DistEnv]:
    """Join the torchrun job (if any) for the duration of the block, then always leave it."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    device = resolve_device(device_name, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    env = DistEnv(rank, world, local_rank, local_world, device)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, **kwargs)
    try:
        yield env
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum ``tensor`` over ranks in place (no-op for one process); returns it."""
    if env.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(env: DistEnv) -> None:
    """Wait for every rank (no-op for one process)."""
    if env.distributed:
        dist.barrier()
