"""Gradient communication of DDP: the all-reduce hook, optional compression, and its byte count.

Every DDP training run registers one communication hook (``install``): torch's own hook for the
chosen ``--grad-compression`` (``allreduce_hook``: the fp32 gradients as DDP's built-in
all-reduce sends them; ``fp16_compress_hook`` / ``bf16_compress_hook``: each bucket cast to 16
bits, all-reduced, cast back), wrapped so that it counts what it hands to the all-reduce. The
count is the payload of each rank per step: the bucket's elements times the bytes of the dtype
all-reduced. What a rank then sends on the wire depends on the collective's algorithm (a ring
sends ``2 (p - 1) / p`` times the payload: docs/SCALING.md); ``bench/train.py`` measures it.

Compression divides the payload by two and rounds every gradient element to 16 bits before the
sum (fp16: 10-bit mantissa and a smallest normal of 6.1e-5, so tiny fp32 gradients lose precision
unless a loss scale lifts them, as AMP's GradScaler does on CUDA; bf16: fp32's range, 7-bit
mantissa). gloo cannot all-reduce bf16 in torch 2.1 (the NGC images; docs/FACTS.md): where the
process group cannot, the compression is refused with one line (``check_compression``), never
silently replaced by another.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ncf.core.names import GRAD_COMPRESSIONS
from ncf.models.distributed import DistEnv, all_reduce_sum

# The dtype each compression all-reduces (None: the gradient's own dtype).
WIRE_DTYPES: dict[str, torch.dtype | None] = {
    "none": None,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
_HOOKS = {
    "none": default_hooks.allreduce_hook,
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": default_hooks.bf16_compress_hook,
}


@dataclass
class CommCounter:
    """What this rank handed to gradient all-reduces so far (a hook's state).

    Attributes
    ----------
    compression
        One of ``GRAD_COMPRESSIONS``.
    payload_bytes
        Bytes all-reduced: each bucket's elements times the all-reduced dtype's size.
    buckets
        Buckets all-reduced (several per optimizer step; none on ``no_sync`` micro-batches).
    """

    compression: str
    payload_bytes: int = 0
    buckets: int = 0

    def count(self, bucket: dist.GradBucket) -> None:
        """Add one bucket (called by the hook, once per bucket per synchronised backward)."""
        buffer = bucket.buffer()  # [n] the bucket's flattened gradients
        dtype = WIRE_DTYPES[self.compression] or buffer.dtype
        self.payload_bytes += buffer.numel() * _itemsize(dtype)
        self.buckets += 1


def _itemsize(dtype: torch.dtype) -> int:
    # torch.dtype.itemsize first appeared in torch 2.1's successors; element_size works on all.
    return torch.empty((), dtype=dtype).element_size()


def _counting_hook(counter: CommCounter, bucket):
    """Count the bucket, then run torch's hook for the compression on the default group.

    Unannotated: DDP compares a hook's annotations with ``dist.GradBucket`` and
    ``torch.futures.Future[torch.Tensor]``, and ``from __future__ import annotations`` makes them
    strings it refuses.
    """
    counter.count(bucket)
    return _HOOKS[counter.compression](None, bucket)


def all_reduces(dtype: torch.dtype, env: DistEnv) -> bool:
    """Whether the process group can sum ``dtype`` tensors (every rank must call this).

    One all-reduce of a single element: a backend without the dtype raises before any rank sends
    anything (gloo in torch 2.1: "Invalid scalar type" for bfloat16), so every rank gets the same
    answer and the group stays usable.
    """
    try:
        all_reduce_sum(torch.zeros(1, dtype=dtype, device=env.device), env)
    except RuntimeError:
        return False
    return True


def check_compression(compression: str, env: DistEnv) -> None:
    """Raise ValueError if ``compression`` is unknown or this process group cannot all-reduce it."""
    if compression not in GRAD_COMPRESSIONS:
        raise ValueError(f"--grad-compression {compression!r}: use one of {GRAD_COMPRESSIONS}")
    dtype = WIRE_DTYPES[compression]
    if dtype is not None and env.distributed and not all_reduces(dtype, env):
        raise ValueError(
            f"--grad-compression {compression}: the {dist.get_backend()} backend of torch "
            f"{torch.__version__} cannot all-reduce {dtype}; use --grad-compression "
            + ("fp16 or none" if compression == "bf16" else "none")
        )


def install(net: DDP, compression: str, env: DistEnv) -> CommCounter:
    """Register the counting hook of ``compression`` on ``net`` (before its first backward)."""
    check_compression(compression, env)
    counter = CommCounter(compression)
    net.register_comm_hook(counter, _counting_hook)
    return counter
