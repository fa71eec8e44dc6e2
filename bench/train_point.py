"""One measurement of the training benchmark, as ``bench/train.py`` hands it to its worker.

The parent writes a ``TrainPoint`` to a JSON file and starts ``python -m ncf.bench.train_worker FILE``
(under ``torchrun`` for several processes); the worker reads it back with every field checked, so
that a point the parent and the worker disagree on fails at once, naming the file and the field.
Kept free of torch: the parent never imports it.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

from ncf.core import textfile
from ncf.core.atomic import write_json
from ncf.core.names import GRAD_COMPRESSIONS

MODES = ("steps", "sampling", "fit")
# Our step's precisions: bf16 is CPU autocast, tf32 TF32 matmuls, amp CUDA fp16 autocast.
OUR_PRECISIONS = ("fp32", "bf16", "tf32", "amp")
# DLE's own step (bench/train_dle.py) in DLE's modes: bench name -> mode.
DLE_PRECISIONS = {"dle": "fp32", "dle-tf32": "tf32", "dle-amp": "amp"}
PRECISIONS = (*OUR_PRECISIONS, *DLE_PRECISIONS)


@dataclasses.dataclass(frozen=True)
class TrainPoint:
    """What one worker measures, and where rank 0 writes the result.

    Attributes
    ----------
    data
        ETL output directory, or a cached ``.npz`` split of ``bench/train_data.py``.
    device
        ``cpu`` or ``cuda``.
    precision
        One of ``PRECISIONS``.
    batch
        Global batch size.
    mode
        ``steps`` (timed optimizer steps), ``sampling`` (an epoch's negatives, exact vs
        approximate) or ``fit`` (a full timed run of ``epochs`` epochs).
    warmup, steps
        Untimed then timed global batches (mode ``steps``).
    micro_batch
        Per-rank micro-batch cap (0: the trainer's default).
    epochs
        Epochs of mode ``fit`` (0: ``TrainConfig``'s default).
    grad_compression
        What DDP all-reduces (``--grad-compression``: none, fp16, bf16).
    shard_embeddings
        Tables sharded by rows across the processes (``--shard-embeddings``).
    result
        Path of the result JSON (empty: not written).
    """

    data: str
    device: str
    precision: str
    batch: int
    mode: str
    warmup: int
    steps: int
    micro_batch: int
    epochs: int
    grad_compression: str = "none"
    shard_embeddings: bool = False
    result: str = ""

    def __post_init__(self) -> None:
        for name, kind in typing.get_type_hints(type(self)).items():
            value = getattr(self, name)
            if type(value) is not kind:  # bool is not an int here, nor "3" a number
                raise ValueError(f"TrainPoint.{name}={value!r}: must be {kind.__name__}")
        if (
            self.mode not in MODES
            or self.precision not in PRECISIONS
            or self.grad_compression not in GRAD_COMPRESSIONS
        ):
            raise ValueError(
                f"TrainPoint mode={self.mode!r}, precision={self.precision!r}, grad_compression="
                f"{self.grad_compression!r}: modes are {MODES}, precisions {PRECISIONS}, "
                f"compressions {GRAD_COMPRESSIONS}"
            )
        if min(self.batch, self.steps) < 1 or min(self.warmup, self.micro_batch, self.epochs) < 0:
            raise ValueError(
                f"TrainPoint batch={self.batch}, steps={self.steps}, warmup={self.warmup}, "
                f"micro_batch={self.micro_batch}, epochs={self.epochs}: need batch and steps >= 1, "
                "the others >= 0"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "TrainPoint") -> TrainPoint:
        """A point from its JSON object; unknown or missing fields are a ValueError."""
        if not isinstance(values, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(values).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        required = {n for n, f in fields.items() if f.default is dataclasses.MISSING}
        missing = sorted(required - set(values))
        if unknown or missing:
            raise ValueError(
                f"{source}: unknown fields {unknown}, missing fields {missing}; a TrainPoint has "
                f"{sorted(fields)}"
            )
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def save(self, path: str | Path) -> Path:
        """Write the point as JSON (atomically); returns ``path``."""
        write_json(Path(path), dataclasses.asdict(self))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> TrainPoint:
        """Read a point ``save`` wrote; a ValueError names the file and what is wrong."""
        return cls.from_dict(textfile.read_json(path), str(path))
