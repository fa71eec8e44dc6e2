"""Row-wise sharded embedding tables (``--shard-embeddings``), on torch.distributed's all-to-all.

Each rank keeps every ``world``-th row of every table (rank ``r`` the rows ``r, r + world, ...``:
``block_rows``), so a table larger than one device fits across the ranks. Cyclic rather than
contiguous blocks: Categorify numbers ids by frequency, so a contiguous first block would hold
the most popular items and serve most of the lookups. The MLP and the other small parameters
stay replicated under DDP, which no longer all-reduces the tables. A lookup sends each id to the rank that owns its row and gets the row back
(``_ShardedLookup``: two all-to-alls forward, one backward, whose gradient rows go to their
owner and are summed there); each distinct id of a lookup is sent once. Every rank must make the same lookups in the same order, as the
trainer's micro-batches and ``evaluate_model``'s batches do.

The step's result is that of DDP on replicated tables: an owner's row gradient is the sum of
every rank's contributions divided by the world size, as DDP averages, and Adam updates each row
where it lives (Adam is elementwise). Checkpoints hold whole tables (``full_state``,
``full_optimizer_state``: gathered on rank 0), so export, evaluation and ``--resume`` read them
as any other; loading a whole table into a shard keeps its block (``ShardedEmbedding``).
torchrec's sharding was tried first: docs/SCALING.md says what it does on each lane.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ncf.models.distributed import DistEnv, hold


def block_rows(num_rows: int, world: int, rank: int) -> int:
    """Rows rank ``rank`` keeps of a ``num_rows`` table: rows ``rank, rank + world, ...`` (row
    ``i`` lives on rank ``i % world``, as its row ``i // world``)."""
    return len(range(rank, num_rows, world))


class ExchangeCounter:
    """Bytes this rank handed to the tables' all-to-alls (ids and rows to other ranks)."""

    def __init__(self) -> None:
        self.bytes = 0


def _exchange(x: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
    """All-to-all of ``x [sum(send), *]`` (rows grouped by destination rank) -> ``[sum(recv), *]``."""
    out, x = x.new_empty((sum(recv), *x.shape[1:])), x.contiguous()
    hold(out, x)  # freed here, never by a gloo thread at exit (ncf.models.distributed)
    dist.all_to_all_single(out, x, recv, send)
    return out


class _ShardedLookup(torch.autograd.Function):
    """Rows ``ids [n]`` of a row-sharded table whose block here is ``weight [hi - lo, d]``."""

    @staticmethod
    def forward(ctx, weight, ids, table):
        world, rank = dist.get_world_size(), dist.get_rank()
        owner = ids % world  # [n]
        order = torch.argsort(owner, stable=True)  # [n] ids grouped by owner
        send_counts = torch.bincount(owner, minlength=world)  # [world]
        recv_counts = torch.empty_like(send_counts)
        hold(send_counts, recv_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        send, recv = send_counts.tolist(), recv_counts.tolist()
        asked = _exchange(ids[order], send, recv) // world  # [m] rows of this block
        rows = _exchange(weight[asked], recv, send)  # [n, d] in ``order``
        table.counter.bytes += (sum(send) - send[rank]) * ids.element_size()
        table.counter.bytes += (sum(recv) - recv[rank]) * weight.shape[1] * weight.element_size()
        out = torch.empty_like(rows)
        out[order] = rows
        ctx.save_for_backward(order, asked)
        ctx.send, ctx.recv, ctx.table, ctx.rows = send, recv, table, weight.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad):
        order, asked = ctx.saved_tensors
        table = ctx.table
        back = _exchange(grad[order], ctx.send, ctx.recv)  # [m, d] gradients of asked rows
        rank = dist.get_rank()
        table.counter.bytes += (
            (sum(ctx.send) - ctx.send[rank]) * grad.shape[1] * grad.element_size()
        )
        out = grad.new_zeros((ctx.rows, grad.shape[1]))
        out.index_add_(0, asked, back)  # summed over every rank's lookups of the row
        return out / dist.get_world_size(), None, None  # DDP's mean over ranks


class ShardedEmbedding(nn.Module):
    """This rank's block of an ``nn.Embedding``'s rows; looks any row up through its owner.

    Attributes
    ----------
    num_embeddings
        Rows of the whole table.
    rank, world
        This rank keeps rows ``rank, rank + world, ...`` of the whole table.
    counter
        Bytes handed to the all-to-alls (``ExchangeCounter``, shared by a model's tables).
    """

    def __init__(self, table: nn.Embedding, env: DistEnv, counter: ExchangeCounter) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = table.num_embeddings, table.embedding_dim
        self.rank, self.world = env.rank, env.world_size
        self.weight = nn.Parameter(table.weight.detach()[self.rank :: self.world].clone())
        self.counter = counter

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``[*ids.shape, d]`` of the whole table for int64 ``ids``."""
        # Each distinct id crosses the network once (popular items recur in every batch): rows
        # [k, d] of the distinct ids [k], spread back by nn.Embedding's lookup, whose backward
        # sums the duplicates' gradients deterministically before they are sent.
        distinct, where = torch.unique(ids.reshape(-1), return_inverse=True)
        rows = _ShardedLookup.apply(self.weight, distinct, self)  # [k, d]
        return F.embedding(where, rows).view(*ids.shape, self.embedding_dim)

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        """A whole table (a checkpoint's) loads its block here; a block loads as it is."""
        key = prefix + "weight"
        value = state_dict.get(key)
        if value is not None and value.shape[0] == self.num_embeddings != self.weight.shape[0]:
            state_dict = {key: value[self.rank :: self.world]}
        super()._load_from_state_dict(state_dict, prefix, *args)


def shard_tables(model: nn.Module, env: DistEnv) -> list[str]:
    """Replace every ``nn.Embedding`` of ``model`` by this rank's ``ShardedEmbedding`` (before the
    model moves to its device: only the blocks get there); the names of their weights."""
    counter = ExchangeCounter()
    names = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Embedding):
                setattr(module, child_name, ShardedEmbedding(child, env, counter))
                names.append(f"{name}.{child_name}.weight".lstrip("."))
    model.exchange = counter
    return names


def sharded_params(model: nn.Module) -> dict[int, ShardedEmbedding]:
    """Index in ``model.parameters()`` (the optimizer's order) -> the table that parameter is."""
    tables = {id(m.weight): m for m in model.modules() if isinstance(m, ShardedEmbedding)}
    return {i: tables[id(p)] for i, p in enumerate(model.parameters()) if id(p) in tables}


def _gather_rows(
    block: torch.Tensor, table: ShardedEmbedding, env: DistEnv, everywhere: bool = False
) -> torch.Tensor | None:
    """The whole table ``[num_embeddings, *]`` from every rank's ``block``: on rank 0 (None
    elsewhere), or on every rank with ``everywhere``."""
    per = -(-table.num_embeddings // table.world)  # rank 0's rows, the most any rank has
    padded = block.detach().new_zeros((per, *block.shape[1:]))
    padded[: block.shape[0]] = block.detach()
    here = everywhere or env.is_main
    parts = [torch.empty_like(padded) for _ in range(env.world_size)] if here else None
    hold(padded, *(parts or []))
    if everywhere:
        dist.all_gather(parts, padded)
    else:
        dist.gather(padded, parts, dst=0)
    if not here:
        return None
    # row i is rank i % world's row i // world: interleave the blocks
    whole = torch.stack(parts, dim=1).reshape(per * table.world, *block.shape[1:])
    return whole[: table.num_embeddings]


def full_state(
    model: nn.Module, env: DistEnv, everywhere: bool = False
) -> dict[str, torch.Tensor | None]:
    """``model.state_dict()`` with whole tables (every rank must call it): on rank 0 (None for
    the tables elsewhere), or on every rank with ``everywhere``."""
    tables = {n: m for n, m in model.named_modules() if isinstance(m, ShardedEmbedding)}
    state = {}
    for name, value in model.state_dict().items():
        owner = tables.get(name.rpartition(".")[0]) if name.endswith("weight") else None
        whole = owner is None
        state[name] = value.detach() if whole else _gather_rows(value, owner, env, everywhere)
    return state


def full_optimizer_state(opt: torch.optim.Optimizer, model: nn.Module, env: DistEnv) -> dict:
    """``opt.state_dict()`` with the sharded tables' moments whole (every rank calls it)."""
    state = opt.state_dict()
    tables = sharded_params(model)
    per_param = dict(state["state"])
    for index, table in tables.items():
        entry = dict(per_param.get(index, {}))
        for key, value in sorted(entry.items()):
            if (
                torch.is_tensor(value)
                and value.dim() > 0
                and value.shape[0] == table.weight.shape[0]
            ):
                entry[key] = _gather_rows(value, table, env)
        per_param[index] = entry
    return {**state, "state": per_param}


def sharded_optimizer_state(state: dict, model: nn.Module) -> dict:
    """A saved ``full_optimizer_state`` cut to this rank's blocks (for ``opt.load_state_dict``)."""
    per_param = dict(state["state"])
    for index, table in sharded_params(model).items():
        entry = dict(per_param.get(index, {}))
        for key, value in entry.items():
            if (
                torch.is_tensor(value)
                and value.dim() > 0
                and value.shape[0] == table.num_embeddings
            ):
                # contiguous: a fused optimizer's kernel reads its state as dense memory
                entry[key] = value[table.rank :: table.world].contiguous()
        per_param[index] = entry
    return {**state, "state": per_param}


def agree_on_overflow(model: nn.Module, env: DistEnv) -> None:
    """Make every rank's loss scaler skip the step if any rank's table gradients overflowed.

    GradScaler checks the gradients this rank holds: the replicated ones are equal on every rank,
    the table blocks are not. An overflow found in one rank's block is written into the first
    replicated gradient of every rank, so that all skip the step together (every rank calls it,
    after the backward passes and before ``scaler.step``).
    """
    blocks = {
        id(m.weight): m.weight.grad for m in model.modules() if isinstance(m, ShardedEmbedding)
    }
    bad = any(g is not None and not torch.isfinite(g).all() for g in blocks.values())
    flag = torch.tensor([float(bad)], device=next(model.parameters()).device)
    hold(flag)
    dist.all_reduce(flag)
    if flag.item() > 0:
        for p in model.parameters():
            if id(p) not in blocks and p.grad is not None and p.grad.numel():
                p.grad.view(-1)[0] = float("inf")  # GradScaler finds it on every rank
                return
