"""One dense embedding gradient per optimizer step on a CPU, built by ``index_add_``.

``nn.Embedding``'s CPU backward (``embedding_dense_backward``) zero-fills a gradient of the whole
table and then has every thread scan every id for the rows in its range, and with a step split
into ``M`` micro-batches (``--micro-batch``) autograd also adds ``M`` such whole-table gradients
into ``weight.grad``: at batch 1M that was a fifth of the CPU step. Here a step's micro-batches
add their rows into one buffer per table with ``index_add_`` (one pass over the rows), and only
the step's last backward hands that buffer to autograd as the table's gradient: 3-4 ms a table
per micro-batch of 48Ki rows, where nn.Embedding's backward takes 9-28 ms (ML-20m's tables).

The gradient is nn.Embedding's, bit for bit, for the step's whole batch at once: both add a
row's gradients in the order of the ids, from zero (tests/models/test_embedding_grad.py). The
optimizer is unchanged (dense Adam: rows no sample touched get a zero gradient and keep moving on
their moments). DDP sees one gradient per table and step, in the last micro-batch, the one it
synchronises (``no_sync`` on the others). CUDA keeps nn.Embedding's backward (its ``index_add_``
adds in no fixed order).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class StepGradients:
    """The step's gradient buffers of some embedding tables, and whether this backward is the last.

    Attributes
    ----------
    last
        True while the micro-batch whose backward comes next is the step's last (set by the
        trainer before each micro-batch; True by default: one micro-batch per step).
    """

    def __init__(self) -> None:
        self.last = True
        self.handed = 0  # gradients handed to autograd so far (one per table and step)
        self._buffers: dict[int, torch.Tensor] = {}  # id(weight) -> [rows, width] gradient

    def add(self, key: int, like: tuple, index: torch.Tensor, grad: torch.Tensor):
        """Add ``grad [n, width]`` into rows ``index [n]`` of table ``key``'s buffer (shape, dtype
        and device ``like``); on the last backward return the buffer and forget it (autograd takes
        it as the table's ``.grad``, without a copy)."""
        buf = self._buffers.get(key)
        if buf is None:  # the step's first micro-batch: one zero fill per table and step
            shape, dtype, device = like
            buf = self._buffers[key] = torch.zeros(shape, dtype=dtype, device=device)
        # index order, one row after the other; int64 ids: with int32 ones it takes 4x as long
        buf.index_add_(0, index.long(), grad.to(buf.dtype))
        if not self.last:
            return None
        self.handed += 1
        return self._buffers.pop(key)

    def reset(self) -> None:
        """Start a step: drop what a step that did not finish (an exception between its
        micro-batches) left behind, so that it cannot reach the next step's gradient."""
        self._buffers.clear()
        self.last = True

    def pending(self) -> int:
        """Tables with a partial gradient (not yet handed over): 0 between steps."""
        return len(self._buffers)


class _Lookup(torch.autograd.Function):
    """``weight[index]`` whose backward accumulates into a ``StepGradients`` buffer."""

    @staticmethod
    def forward(ctx, weight, index, grads):
        ctx.save_for_backward(index)
        ctx.grads, ctx.key = grads, id(weight)
        ctx.like = (weight.shape, weight.dtype, weight.device)
        return F.embedding(index, weight)  # [*index.shape, width]

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        rows = grad_out.reshape(-1, grad_out.shape[-1])  # [n, width]
        return ctx.grads.add(ctx.key, ctx.like, index.reshape(-1), rows), None, None


def lookup(table: nn.Module, index: torch.Tensor, grads: StepGradients | None) -> torch.Tensor:
    """``table(index)``; its gradient through ``grads`` when given (training), else
    nn.Embedding's. A table that is not an ``nn.Embedding`` (a sharded one, models/sharding.py)
    looks its rows up itself."""
    if grads is None or not torch.is_grad_enabled() or not isinstance(table, nn.Embedding):
        return table(index)
    return _Lookup.apply(table.weight, index, grads)
