"""torchrun environment, process group setup/teardown, all-reduce helpers and runtime knobs.

``torchrun`` sets RANK and WORLD_SIZE (global: over all nodes) and LOCAL_RANK and LOCAL_WORLD_SIZE
(this node's processes); without them this is a single process. NCCL on CUDA, gloo on CPU. The
process group is always destroyed (try/finally), and its threads are joined before the interpreter
shuts down (``leave_group``).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections import deque
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


def dist_env(device_name: str = "auto") -> DistEnv:
    """This process's place in the job, from the variables torchrun sets (one process without).

    RANK and WORLD_SIZE count the processes of every node, LOCAL_RANK and LOCAL_WORLD_SIZE those
    of this node: the GPU and the CPU thread share follow the local ones, rank-0-only work the
    global rank.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    # Launchers that set only RANK/WORLD_SIZE: assume one node (the smaller thread share).
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    if not (0 <= rank < world and 0 <= local_rank < local_world <= world):
        raise ValueError(
            f"inconsistent torchrun environment: RANK={rank} WORLD_SIZE={world} "
            f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world}; launch with torchrun"
        )
    device = resolve_device(device_name, local_rank)
    return DistEnv(rank, world, local_rank, local_world, device)


@contextlib.contextmanager
def process_group(device_name: str = "auto") -> Iterator[DistEnv]:
    """Join the torchrun job (if any) for the duration of the block, then always leave it."""
    env = dist_env(device_name)
    device = env.device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if env.distributed and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        _import_before_group()
        # The current device (set above) tells NCCL which GPU is this rank's, on every torch
        # version; init_process_group's device_id argument does not exist before torch 2.3.
        dist.init_process_group(backend=backend)
    try:
        yield env
    finally:
        if dist.is_available() and dist.is_initialized():
            leave_group()


def _import_before_group() -> None:
    """Import ``torch._dynamo`` before the process group exists.

    DDP imports it on construction; imported while a group exists, its import-time scan of the
    torch namespaces keeps references to the default group, which then outlives
    ``destroy_process_group`` (and so do the group's gloo worker threads, see ``leave_group``).
    """
    with contextlib.suppress(ImportError):
        import torch._dynamo  # noqa: F401


# Every tensor handed to a collective, kept until the group is destroyed (see ``leave_group``):
# a few small tensors per epoch (the loss sum, the evaluation sums).
_COLLECTIVE_TENSORS: list[torch.Tensor] = []
# The tensors of the latest collectives that run every step (the sharded tables' all-to-alls,
# ``hold``). Mid-run a gloo thread that frees one just takes the GIL; the hazard is at the group's
# destruction and at exit (``leave_group``), when only the latest collectives' work may be alive.
_RECENT_TENSORS: deque[torch.Tensor] = deque(maxlen=16)


def leave_group() -> None:
    """Destroy the process group and free it now, joining its worker threads.

    A gloo collective's work object (which holds the all-reduced tensors) is released by the gloo
    worker thread that ran it, after the waiting rank has already been told the result. If that
    drops the last reference to a tensor that Python created, the worker thread needs the GIL.
    Two ways that goes wrong: a rank that exits at once races the thread (Python terminates it
    from ``take_gil`` during interpreter shutdown and the process aborts, "terminate called
    without an active exception"), and a group destroyed while the GIL is held (torch 2.1 frees it
    under the GIL) joins a thread that waits for the GIL: a deadlock. So Python keeps every
    tensor it hands to a collective (``all_reduce_sum``) until the group is gone: the worker
    threads never free one. Freeing the group here joins them while the interpreter is intact;
    ``gc.collect`` frees a DDP module left in a reference cycle, whose reducer also holds the
    group. The kept tensors go last, on this thread.
    """
    dist.destroy_process_group()
    gc.collect()
    _COLLECTIVE_TENSORS.clear()
    _RECENT_TENSORS.clear()


def hold(*tensors: torch.Tensor) -> None:
    """Keep the tensors of a collective that runs every step until many later ones have run (or
    the group is gone): never freed by a gloo worker thread (``leave_group``)."""
    _RECENT_TENSORS.extend(tensors)


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum ``tensor`` over ranks in place (no-op for one process); returns it."""
    if env.distributed:
        _COLLECTIVE_TENSORS.append(tensor)  # freed by leave_group, never by a gloo thread
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(env: DistEnv) -> None:
    """Wait for every rank (no-op for one process)."""
    if env.distributed:
        dist.barrier()


def ranks_with(flags: list[bool], env: DistEnv) -> list[int]:
    """For each flag, on how many ranks it is true (every rank must call this, in the same order).

    Lets all ranks take one decision from facts that may differ between nodes, e.g. whether a
    file exists where the nodes do not share a filesystem.
    """
    counts = torch.tensor([int(f) for f in flags], dtype=torch.int64, device=env.device)
    all_reduce_sum(counts, env)
    return [int(c) for c in counts.tolist()]
