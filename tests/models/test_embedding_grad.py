"""One dense embedding gradient per step (models/embedding_grad.py) is nn.Embedding's.

No tolerance on the tables: however the step is cut into micro-batches, each table's gradient is
bit for bit what nn.Embedding's backward gives for the whole batch at once (both add a row's
gradients in the order of the ids, from zero), and every other gradient is autograd's for the
same cut. Rows no sample touched get exactly zero.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ncf.models.data import load_etl
from ncf.models.distributed import dist_env
from ncf.models.embedding_grad import StepGradients
from ncf.models.epoch import epoch_generator, plan_epoch
from ncf.models.kinds import build_model
from ncf.models.presets import TrainConfig
from ncf.models.trainer import RunOptions, Trainer

USERS, ITEMS = 5000, 4000  # more rows than any micro-batch below: the tables take the new path


def _grads(
    kind: str, accumulate: bool, micro: int, n: int = 60
) -> tuple[dict, StepGradients | None]:
    """Gradients of one batch of ``n`` rows in ``micro`` micro-batches (summed losses)."""
    torch.manual_seed(0)
    cfg = {"num_users": USERS + 2, "num_items": ITEMS + 2, "factors": 4}
    if kind == "neumf":
        cfg |= {"mlp_layers": [8, 4], "dropout": 0.0}
    model = build_model(kind, cfg).train()
    model.step_grads = StepGradients() if accumulate else None
    g = torch.Generator().manual_seed(1)
    users = torch.randint(0, USERS, (n,), generator=g)  # the last 2 users and items: untouched
    items = torch.randint(0, ITEMS, (n,), generator=g)
    labels = (torch.rand(n, generator=g) < 0.3).float()
    parts = zip(users.chunk(micro), items.chunk(micro), labels.chunk(micro), strict=True)
    for m, (u, i, y) in enumerate(parts):
        if model.step_grads is not None:
            model.step_grads.last = m == micro - 1
        logits = model(u, i)
        torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="sum").backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, model.step_grads


@pytest.mark.parametrize("kind", ["neumf", "mf"])
@pytest.mark.parametrize(("micro", "n"), [(1, 60), (4, 600), (3, 9000)])  # 3,000 ids: threaded
def test_table_gradients_are_nn_embedding_s_for_the_whole_batch(kind: str, micro: int, n: int):
    torch.set_num_threads(2)  # nn.Embedding's backward runs in threads from 1,000 rows on
    whole, _ = _grads(kind, accumulate=False, micro=1, n=n)
    same_cut, _ = _grads(kind, accumulate=False, micro=micro, n=n)
    got, grads = _grads(kind, accumulate=True, micro=micro, n=n)
    assert grads.pending() == 0 and grads.handed == 4  # each table's buffer, on the last backward
    assert whole.keys() == got.keys()
    tables = [n for n in got if "embed" in n or "bias." in n]
    assert len(tables) == 4
    for name in got:
        want = whole[name] if name in tables else same_cut[name]
        assert torch.equal(got[name], want), name
    for name in tables:
        seen = USERS if name.startswith(("mf_user", "mlp_user", "user")) else ITEMS
        assert torch.count_nonzero(got[name][seen:]) == 0, name
        assert torch.count_nonzero(got[name][:seen]) > 0, name


def _trainer(etl_dir: Path, accumulate: bool) -> Trainer:
    # 4 micro-batches of 64 rows, fewer than either table's (123 users, 83 items); DLE's Adam
    cfg = TrainConfig(batch_size=256, micro_batch=64, seed=3)
    tr = Trainer(load_etl(etl_dir), cfg, dist_env("cpu"), RunOptions(out=etl_dir, etl_dir=etl_dir))
    assert (tr.model.step_grads is not None) and tr.micro_batches(256) == 4
    if not accumulate:
        tr.model.step_grads = None
    return tr


def test_a_trainer_step_updates_as_nn_embedding_s_backward(etl_dir: Path):
    """The same step with nn.Embedding's backward per micro-batch: the tables' gradients differ
    only in the order their micro-batch sums are added, so the parameters agree to rounding."""
    torch.set_num_threads(1)
    params = []
    for accumulate in (False, True):
        tr = _trainer(etl_dir, accumulate)
        gen = epoch_generator(3, 0, torch.device("cpu"))
        plan = plan_epoch(tr.data, 4, "exact", tr.positives, gen)
        before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
        tr.step(plan, 0, 256, gen)
        assert (tr.model.step_grads is not None) == accumulate
        assert not accumulate or tr.step_grads.handed == 4
        params.append({n: p.detach().clone() for n, p in tr.model.named_parameters()})
    for name, old in before.items():
        torch.testing.assert_close(params[1][name], params[0][name], msg=name)
        assert not torch.equal(params[1][name], old), name  # the step moved every tensor


def _failing_on_call(fn, n: int):
    """``fn``, except that its ``n``-th call raises RuntimeError("injected")."""
    calls = []

    def wrapped(*args):
        calls.append(1)
        if len(calls) == n:
            raise RuntimeError("injected")
        return fn(*args)

    return wrapped


def test_a_step_after_an_interrupted_one_starts_from_zero(etl_dir: Path):
    """A step that raised between its micro-batches leaves nothing in the next step's gradient."""
    torch.set_num_threads(1)
    after = []
    for interrupt in (False, True):
        tr = _trainer(etl_dir, accumulate=True)
        gen = epoch_generator(3, 0, torch.device("cpu"))
        plan = plan_epoch(tr.data, 4, "exact", tr.positives, gen)
        if interrupt:  # the 2nd of 4 micro-batches raises, after the 1st filled the buffers
            forward = tr.net.forward
            tr.net.forward = _failing_on_call(forward, 2)
            with pytest.raises(RuntimeError, match="injected"):
                tr.step(plan, 0, 256, torch.Generator().manual_seed(5))
            assert tr.step_grads.pending() == 4 and not tr.step_grads.last
            tr.net.forward = forward
        tr.step(plan, 0, 256, gen)
        assert tr.step_grads.pending() == 0
        after.append({n: p.detach().clone() for n, p in tr.model.named_parameters()})
    for name, want in after[0].items():
        assert torch.equal(after[1][name], want), name
