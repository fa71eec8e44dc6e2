"""--shard-embeddings: row-wise sharded tables train as replicated DDP does, and checkpoint whole.

Two gloo processes on loopback train the same NeuMF on small ``ncf synth`` data (scale 0.003: 415
users, 1,000 items) with replicated tables and with sharded ones (``tests/models/sharding_run.py``,
one torchrun job). The sharded step is the replicated one's with the sums taken in another order,
so the stated tolerance is tight: each epoch's loss within 1e-4 relative and HR@10 within 0.01.
The weights drift apart as any change of summation order makes them (Adam's normalised update
turns the last-bit differences of rarely seen rows' tiny gradients into whole steps): after 4
epochs each tensor's mean absolute difference from the replicated run's is within 2% of its mean
magnitude (measured: 0.5% at most; a row gathered into the wrong place would be ~100%).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from ncf.models import checkpoint
from ncf.models.distributed import DistEnv
from ncf.models.sharding import ExchangeCounter, ShardedEmbedding, block_rows
from tests.models.etl_data import synth_ratings, write_etl_dir
from tests.models.two_ranks import rank_record as record
from tests.models.two_ranks import run_two_ranks

TRAIN = {
    "epochs": 4,
    "negatives": 2,
    "batch_size": 8192,
    # 8 per rank and step, each smaller than the item table: the replicated run takes the
    # one-gradient-per-step path (models/embedding_grad.py), the sharded one its own lookups
    "micro_batch": 512,
    "eval_batch_size": 65536,
    "factors": 16,
    "mlp_layers": [64, 32, 16],
    "dropout": 0.0,
    "lr": 0.02,
    "beta1": 0.9,
    "beta2": 0.999,
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sharding")
    etl = write_etl_dir(synth_ratings(0.003), tmp / "etl", negatives=100)
    run_two_ranks("tests.models.sharding_run", str(etl), str(tmp), json.dumps(TRAIN))
    return tmp


@pytest.mark.distributed
def test_sharded_tables_train_as_replicated_ddp(runs: Path):
    rep, sh = (record(runs, r)["history"] for r in ("replicated", "sharded"))
    assert len(rep) == len(sh) == TRAIN["epochs"]
    for a, b in zip(rep, sh, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["hr@10"] == pytest.approx(a["hr@10"], abs=0.01)
    assert rep[-1]["loss"] < 0.7 * rep[0]["loss"]  # not vacuous: both learned


@pytest.mark.distributed
def test_each_rank_holds_half_the_rows_and_all_reduces_only_the_rest(runs: Path):
    ranks = [record(runs, "sharded", r) for r in (0, 1)]
    whole = checkpoint.load(runs / "sharded" / checkpoint.BEST)["model"]
    for name, shape in ranks[0]["rows"].items():
        rows = whole[name].shape[0]
        assert [ranks[0]["rows"][name][0], ranks[1]["rows"][name][0]] == [
            block_rows(rows, 2, r) for r in (0, 1)
        ]
        assert shape[1] == whole[name].shape[1]
    rec = ranks[0]
    assert rec["payload_bytes"] == rec["replicated_params"] * 4 * rec["steps"]
    assert rec["exchange_bytes"] > 0 and ranks[1]["exchange_bytes"] > 0


@pytest.mark.distributed
def test_sharded_checkpoints_hold_whole_tables_and_resume(runs: Path):
    rep = checkpoint.load(runs / "replicated" / checkpoint.LAST)
    sh = checkpoint.load(runs / "sharded" / checkpoint.LAST)
    assert sh["model"].keys() == rep["model"].keys()
    for name, value in rep["model"].items():  # rows in place: a misplaced row differs by ~100%
        gap = (sh["model"][name] - value).abs().mean() / value.abs().mean()
        assert gap < 0.02, (name, float(gap))
    moments = [s for s in sh["optimizer"]["state"].values() if "exp_avg" in s]
    shapes = sorted(tuple(s["exp_avg"].shape) for s in moments)
    assert shapes == sorted(tuple(v.shape) for v in rep["model"].values())
    resumed = record(runs, "resumed")
    assert resumed["start_epoch"] == TRAIN["epochs"] // 2
    full = record(runs, "sharded")["history"]
    for a, b in zip(full, resumed["history"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)


@pytest.mark.parametrize(
    ("rows", "world", "blocks"), [(10, 2, [5, 5]), (10, 3, [4, 3, 3]), (1, 2, [1, 0])]
)
def test_blocks_cover_the_table_once(rows: int, world: int, blocks: list):
    assert [block_rows(rows, world, r) for r in range(world)] == blocks


def test_a_whole_table_loads_its_block_into_a_shard():
    table = nn.Embedding(7, 3)
    env = DistEnv(
        rank=1, world_size=2, local_rank=1, local_world_size=2, device=torch.device("cpu")
    )
    shard = ShardedEmbedding(table, env, ExchangeCounter())
    torch.testing.assert_close(shard.weight.detach(), table.weight.detach()[[1, 3, 5]])
    whole = torch.arange(21, dtype=torch.float32).view(7, 3)
    shard.load_state_dict({"weight": whole})
    torch.testing.assert_close(shard.weight.detach(), whole[[1, 3, 5]])
    shard.load_state_dict({"weight": whole[:3] + 1})  # a block of its own size loads as it is
    torch.testing.assert_close(shard.weight.detach(), whole[:3] + 1)
