"""One dense embedding gradient per optimizer step, not one per micro-batch.

``nn.Embedding``'s backward builds a zero-filled gradient of the whole table for every backward
pass, and autograd then adds it into ``weight.grad``: with a step split into ``M`` micro-batches
(the CPU default, ``--micro-batch``) that is ``M`` fills and ``M`` additions of every table, a
fifth of the step at batch 1M (bench/results/profile_step.md). Here the step's micro-batches add
their rows into one buffer per table (only the rows a micro-batch touched), and only the step's
last backward hands that buffer to autograd as the table's gradient. Tables with fewer rows than
a micro-batch (ML-20m's item tables at the CPU micro-batch of 48Ki) keep nn.Embedding's backward:
filling and adding them costs about what the row sums do.

The gradient is the same, bit for bit (``_row_sums``), and the optimizer is unchanged (dense
Adam: rows no sample touched get a zero gradient and keep moving on their moments, as before). DDP sees one gradient per table and step, in the last micro-batch, the one
it synchronises (``no_sync`` on the others).
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
        rows, compact = _row_sums(index, grad, buf.shape[0])
        buf.index_add_(0, rows, compact)  # distinct rows: no two writes meet
        if not self.last:
            return None
        self.handed += 1
        return self._buffers.pop(key)

    def pending(self) -> int:
        """Tables with a partial gradient (not yet handed over): 0 between steps."""
        return len(self._buffers)


def _row_sums(
    index: torch.Tensor, grad: torch.Tensor, num_rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows ``[k]`` (ascending) of ``index [n]`` and the sum of ``grad [n, width]``
    per row ``[k, width]``, by nn.Embedding's own backward kernel on a table of those ``k`` rows.

    The kernel adds a row's gradients in the order of ``index`` (deterministically; a scatter with
    accumulation into the whole table, ``index_put_``, is not on CPUs), so each micro-batch's sums
    are bit for bit those of nn.Embedding, and so is their sum over the micro-batches: autograd
    too adds the micro-batches' gradients one after the other. The rows are found with a mark per
    table row, not a sort (``torch.unique``): O(num_rows + n) integer work.
    """
    mark = torch.zeros(num_rows, dtype=torch.bool, device=index.device)
    mark[index] = True  # every write of a row writes the same value
    rows = torch.nonzero(mark).squeeze(1)  # [k] ascending
    compact_id = torch.empty(num_rows, dtype=torch.long, device=index.device)
    compact_id[rows] = torch.arange(rows.numel(), device=index.device)
    compact = torch.ops.aten.embedding_dense_backward(
        grad, compact_id[index], rows.numel(), -1, False
    )  # [k, width]
    return rows, compact


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
    """``table(index)``; its gradient through ``grads`` when given (training) and the table has
    more rows than the lookup (a smaller table costs nn.Embedding's backward less than the row
    sums cost here), else nn.Embedding's. A table that is not an ``nn.Embedding`` (a sharded one,
    models/sharding.py) looks its rows up itself."""
    if grads is None or not torch.is_grad_enabled() or not isinstance(table, nn.Embedding):
        return table(index)
    if table.num_embeddings <= index.numel():
        return table(index)
    return _Lookup.apply(table.weight, index, grads)
