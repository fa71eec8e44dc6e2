"""MF baseline: the model's math, `ncf train --model mf`, its checkpoint, `ncf evaluate` on it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.testing import assert_close

from ncf.models import checkpoint, evaluate, train
from ncf.models.mf import MF, MFConfig
from ncf.models.neumf import NeuMF
from ncf.models.trainer import METRICS_FILE
from tests.models.conftest import FAST, parse
from tests.models.two_ranks import run_two_ranks


def test_logit_is_dot_product_plus_biases_and_score_matrix_agrees():
    torch.manual_seed(0)
    model = MF(MFConfig(num_users=6, num_items=9, factors=4)).eval()
    with torch.no_grad():
        model.user_bias.weight.normal_()
        model.item_bias.weight.normal_()
        model.bias.fill_(0.3)
    users, items = torch.tensor([0, 5, 2]), torch.tensor([8, 1, 1])
    p, q = model.user_embed.weight[users], model.item_embed.weight[items]
    by_hand = (
        (p * q).sum(1) + model.user_bias.weight[users, 0] + model.item_bias.weight[items, 0] + 0.3
    )
    assert_close(model(users, items), by_hand)
    grid = model.score_matrix(torch.tensor([1, 4]), torch.arange(2, 7))
    pairs = model(torch.tensor([1, 4]).repeat_interleave(5), torch.arange(2, 7).repeat(2))
    assert_close(grid, pairs.view(2, 5))


def test_penalty_is_per_example_l2_of_what_the_batch_touched():
    model = MF(MFConfig(num_users=3, num_items=3, factors=2, l2=0.5)).train()
    with torch.no_grad():
        model.bias.fill_(2.0)
    users, items = torch.tensor([0, 0]), torch.tensor([1, 2])  # user 0 counted once per example
    model(users, items)
    p, q = model.user_embed.weight.detach(), model.item_embed.weight.detach()
    want = 0.5 * (2 * p[0].square().sum() + q[1].square().sum() + q[2].square().sum() + 2 * 4.0)
    assert float(model.penalty().detach()) == pytest.approx(float(want), rel=1e-6)
    before = model.penalty()
    model.eval()
    with torch.no_grad():
        model(torch.tensor([2]), torch.tensor([0]))
    assert model.penalty() is before  # evaluation forwards leave the training term alone


def test_bad_config_names_the_values():
    with pytest.raises(ValueError, match="l2=-1"):
        MFConfig(num_users=2, num_items=2, l2=-1.0)


MF_ARGS = [*FAST, "--model", "mf", "--factors", "16", "--epochs", "4", "--deterministic"]


@pytest.fixture(scope="module")
def mf_run(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mf") / "run"
    assert train.run(parse(train, ["--data", etl_dir, "--out", out, *MF_ARGS])) == 0
    return out


def test_mf_trains_with_the_same_trainer_and_beats_itempop(mf_run: Path):
    m = json.loads((mf_run / METRICS_FILE).read_text())
    assert m["config"]["model"] == "mf" and m["hr@10"] > m["itempop_hr@10"] + 0.2
    assert m["history"][-1]["loss"] < m["history"][0]["loss"]
    model, state = checkpoint.load_model(mf_run / checkpoint.BEST)
    assert isinstance(model, MF) and checkpoint.model_kind(state) == "mf"
    assert state["config"]["factors"] == 16
    with pytest.raises(ValueError, match="holds a 'mf' model; this command takes \\['neumf'\\]"):
        checkpoint.load_model(mf_run / checkpoint.BEST, kinds=("neumf",))


def test_l2_shrinks_the_embeddings(etl_dir: Path, tmp_path: Path):
    norms = {}
    for l2 in ("0", "1"):
        out = tmp_path / l2
        args = [*MF_ARGS, "--epochs", "2", "--l2", l2]
        assert train.run(parse(train, ["--data", etl_dir, "--out", out, *args])) == 0
        model, _ = checkpoint.load_model(out / checkpoint.LAST)
        norms[l2] = float(
            model.user_embed.weight.detach().norm() + model.item_embed.weight.detach().norm()
        )
    assert norms["1"] < 0.5 * norms["0"]


def brute_force_full(model, etl_dir: Path, k: int = 10) -> dict[str, float]:
    """Per-user loop: score every item one pair at a time, drop training items, rank by hand."""
    from ncf.models.data import load_etl
    from tests.models.test_full_ranking import brute_force

    data = load_etl(etl_dir)
    lo, hi = data.item_range
    sums = [0.0, 0.0, 0.0]
    with torch.no_grad():
        for u, item in zip(data.test_users.tolist(), data.test_items.tolist(), strict=True):
            row = [float(model(torch.tensor([u]), torch.tensor([i]))[0]) for i in range(lo, hi)]
            seen = {i - lo for i in data.train_items[data.train_users == u].tolist()}
            for j, v in enumerate(brute_force(row, seen, item - lo, k)):
                sums[j] += v
    n = data.test_users.numel()
    return {"hr": sums[0] / n, "ndcg": sums[1] / n, "mrr": sums[2] / n}


@pytest.mark.parametrize("kind", ["mf", "neumf"])
def test_evaluate_full_ranking_matches_a_per_user_loop(
    kind: str, mf_run: Path, etl_dir: Path, tmp_path: Path, capsys
):
    run = mf_run
    if kind == "neumf":
        run = tmp_path / "neumf"
        assert (
            train.run(parse(train, ["--data", etl_dir, "--out", run, *FAST, "--epochs", "1"])) == 0
        )
    out = tmp_path / "evaluation.json"
    argv = ["--data", etl_dir, "--checkpoint", run / checkpoint.BEST, "--out", out]
    # 600 scores per chunk: 7 users of 80 items, so several chunks and a ragged last one
    argv += ["--device", "cpu", "--full-ranking", "--eval-batch-size", "600"]
    assert evaluate.run(parse(evaluate, argv)) == 0
    report = json.loads(out.read_text())
    model, _ = checkpoint.load_model(run / checkpoint.BEST)
    assert isinstance(model, MF if kind == "mf" else NeuMF) and report["model"] == kind
    want = brute_force_full(model, etl_dir)
    for name in ("hr", "ndcg"):
        assert report[f"full_{name}@10"] == pytest.approx(want[name], abs=1e-6)
    assert report["full_mrr"] == pytest.approx(want["mrr"], abs=1e-6)
    # 80 items, 11 training items per user: 69 candidates (the held-out item among them)
    assert report["full_candidates_per_user"] == pytest.approx(69.0)
    assert 0.0 < report["itempop_full_hr@10"] < report["full_hr@10"]
    printed = capsys.readouterr().out
    assert "full: HR@10" in printed and ("MF " if kind == "mf" else "NeuMF") in printed
    assert not math.isnan(report["full_ranking_seconds"])


def _flat(tree: dict, prefix: str = "") -> dict[str, float]:
    """A nested dict of figures as one flat dict ("full/model/hr@10": ...)."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}/")
        else:
            out[prefix + key] = value
    return out


def test_suite_agrees_with_the_headline_figures(mf_run: Path, etl_dir: Path, tmp_path: Path):
    argv = ["--data", etl_dir, "--checkpoint", mf_run / checkpoint.BEST, "--device", "cpu",
            "--full-ranking", "--suite", "--out", tmp_path / "r.json", "--threads", "1"]  # fmt: skip
    assert evaluate.run(parse(evaluate, argv)) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    suite = r["suite"]
    for prefix, name in (("", "model"), ("itempop_", "itempop")):
        assert suite["sampled"][name]["hr@10"] == pytest.approx(r[f"{prefix}hr@10"], abs=1e-12)
        assert suite["sampled"][name]["ndcg@10"] == pytest.approx(r[f"{prefix}ndcg@10"], abs=1e-12)
        full = suite["full"][name]
        assert full["hr@10"] == pytest.approx(r[f"{prefix}full_hr@10"], abs=1e-12)
        assert full["precision@10"] == pytest.approx(full["hr@10"] / 10)
        assert full["map@20"] == full["mrr@20"] >= full["mrr@10"] >= full["mrr@5"]
        assert 0 < full["coverage@5"] <= full["coverage@10"] <= full["coverage@20"] <= 1
    # ItemPop recommends the same few items to everyone, and popular ones
    assert suite["full"]["itempop"]["coverage@10"] < suite["full"]["model"]["coverage@10"]
    pops = (
        suite["full"]["itempop"]["avg_popularity@10"],
        suite["full"]["model"]["avg_popularity@10"],
    )
    assert pops[0] > pops[1]
    with pytest.raises(ValueError, match="--per-user .* needs --suite"):
        parse(evaluate, ["--data", etl_dir, "--checkpoint", "x.pt", "--per-user", "p.parquet"])


@pytest.mark.distributed
def test_full_ranking_sharded_over_two_ranks_equals_one(
    mf_run: Path, etl_dir: Path, tmp_path: Path
):
    """Each rank ranks its shard of users; the all-reduced sums give the one-process figures."""
    argv = ["--data", str(etl_dir), "--checkpoint", str(mf_run / checkpoint.BEST), "--device", "cpu",
            "--full-ranking", "--eval-batch-size", "600", "--threads", "1", "--suite"]  # fmt: skip
    one_argv = [*argv, "--out", tmp_path / "one.json", "--per-user", tmp_path / "one.parquet"]
    assert evaluate.run(parse(evaluate, one_argv)) == 0
    run_two_ranks("ncf.cli", "evaluate", *map(str, argv), "--out", str(tmp_path / "two.json"),
                  "--per-user", str(tmp_path / "two.parquet"))  # fmt: skip
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert two["world_size"] == 2
    for key in (
        "full_hr@10",
        "full_ndcg@10",
        "full_mrr",
        "itempop_full_mrr",
        "full_candidates_per_user",
    ):
        assert two[key] == pytest.approx(one[key], rel=1e-12), key
    assert _flat(two["suite"]) == pytest.approx(_flat(one["suite"]), rel=1e-12)
    per_user = [pd.read_parquet(tmp_path / f) for f in ("one.parquet", "two.parquet")]
    pd.testing.assert_frame_equal(*per_user)  # every user's counts, gathered from both ranks
