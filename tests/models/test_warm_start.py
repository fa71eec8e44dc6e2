"""``ncf train --init-from``: a new run from a previous model, its tables grown to new ids."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from ncf.models import checkpoint, train
from ncf.models.data import load_etl
from ncf.models.kinds import build_model
from ncf.models.trainer import METRICS_FILE
from ncf.models.warm_start import check_start, grown, start_from
from ncf.workflows.etl import EtlConfig, run_etl
from tests.models.conftest import FAST, parse
from tests.models.etl_data import planted_ratings

EPOCHS = ["--epochs", "1", "--factors", "8", "--layers", "16", "8"]


def _csv(frame: pd.DataFrame, path: Path) -> Path:
    ratings = pd.DataFrame(
        {
            "userId": frame.user + 1,
            "movieId": frame.item + 1,
            "rating": 4.0,
            "timestamp": 10**9 + frame.time,
        }  # fmt: skip
    )
    ratings.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> dict[str, Path]:
    """ETL outputs (pandas engine) of day 1 (users < 90, items < 60) and of day 2 (every rating)
    numbered after day 1; a day-1 run; and an output of day 2 numbered on its own."""
    root = tmp_path_factory.mktemp("days")
    ratings = planted_ratings()
    day1 = ratings[(ratings.user < 90) & (ratings.item < 60)]
    kw = {"engine": "pandas", "min_ratings": 5, "eval_negatives": 10}
    run_etl(EtlConfig(input=_csv(day1, root / "d1.csv"), out=root / "etl1", **kw))
    day2 = _csv(ratings, root / "d2.csv")
    run_etl(EtlConfig(input=day2, out=root / "etl2", vocab_from=root / "etl1", **kw))
    run_etl(EtlConfig(input=day2, out=root / "alone", **kw))
    run = root / "run1"
    assert train.run(parse(train, ["--data", root / "etl1", "--out", run, *FAST, *EPOCHS])) == 0
    return {"etl1": root / "etl1", "etl2": root / "etl2", "alone": root / "alone", "run1": run}


def test_grown_copies_equal_tensors_and_fills_the_first_rows():
    old = {"emb": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "w": torch.tensor([5.0])}
    fresh = {"emb": torch.zeros(4, 2) - 1, "w": torch.tensor([0.0])}
    got = grown(Path("x.pt"), old, fresh, {(2, 4)})
    torch.testing.assert_close(got["emb"], torch.tensor([[1.0, 2], [3, 4], [-1, -1], [-1, -1]]))
    torch.testing.assert_close(got["w"], torch.tensor([5.0]))
    # A DDP-wrapped state dict is the same model.
    wrapped = {f"module.{k}": v for k, v in old.items()}
    torch.testing.assert_close(grown(Path("x.pt"), wrapped, fresh, {(2, 4)})["emb"], got["emb"])


@pytest.mark.parametrize(
    "old,rows,match",
    [
        (
            {"emb": torch.zeros(2, 3), "w": torch.zeros(1)},
            {(2, 4)},
            r"emb is \[2, 3\] there and \[4, 2\]",
        ),
        ({"emb": torch.zeros(5, 2), "w": torch.zeros(1)}, {(2, 4)}, r"emb is \[5, 2\] there"),
        # More rows, but not the data's growth: another layer width, not a grown table.
        ({"emb": torch.zeros(3, 2), "w": torch.zeros(1)}, {(2, 4)}, r"emb is \[3, 2\] there"),
        ({"emb": torch.zeros(2, 2)}, {(2, 4)}, "another architecture"),
    ],
)
def test_grown_refuses_another_architecture(old, rows, match):
    with pytest.raises(ValueError, match=match):
        grown(Path("x.pt"), old, {"emb": torch.zeros(4, 2), "w": torch.zeros(1)}, rows)


def test_start_keeps_old_rows_and_fresh_new_rows(days):
    data = load_etl(days["etl2"], torch.device("cpu"))
    cfg = parse(train, ["--data", days["etl2"], "--out", "unused", *FAST, *EPOCHS]).hp
    torch.manual_seed(cfg.seed)
    fresh = build_model(cfg.model, cfg.model_config(data.num_users, data.num_items))
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    path = days["run1"] / checkpoint.BEST
    weights, about = start_from(
        path, check_start(path, days["etl2"], cfg.model), data, fresh.state_dict()
    )
    old = checkpoint.load(days["run1"] / checkpoint.BEST)["model"]
    n_old = old["mf_user_embed.weight"].shape[0]
    assert about["users"] == [n_old, data.num_users] and data.num_users > n_old
    for name in ("mf_user_embed.weight", "mlp_item_embed.weight"):
        rows = len(old[name])
        torch.testing.assert_close(weights[name][:rows], old[name])
        torch.testing.assert_close(weights[name][rows:], before[name][rows:])
    torch.testing.assert_close(weights["final.weight"], old["final.weight"])


def test_warm_run_trains_from_the_checkpoint_and_records_it(days, tmp_path):
    # At a learning rate of 1e-9 one epoch leaves the weights where they started: day 1's.
    argv = ["--data", days["etl2"], "--out", tmp_path / "run2", *FAST, *EPOCHS, "--lr", "1e-9"]
    assert train.run(parse(train, [*argv, "--init-from", days["run1"] / checkpoint.BEST])) == 0
    metrics = json.loads((tmp_path / "run2" / METRICS_FILE).read_text())
    start = metrics["init_from"]
    assert start["checkpoint"] == str((days["run1"] / checkpoint.BEST).resolve())
    assert start["users"][1] > start["users"][0] and start["items"][1] > start["items"][0]
    old = checkpoint.load(days["run1"] / checkpoint.BEST)["model"]
    new = checkpoint.load(tmp_path / "run2" / checkpoint.BEST)["model"]
    rows = len(old["mlp_user_embed.weight"])
    torch.testing.assert_close(new["mlp_user_embed.weight"][:rows], old["mlp_user_embed.weight"])
    torch.testing.assert_close(new["final.weight"], old["final.weight"], atol=1e-6, rtol=0)


def test_data_numbered_on_its_own_is_refused_before_anything_is_written(days, tmp_path):
    argv = ["--data", days["alone"], "--out", tmp_path / "r", *FAST, *EPOCHS]
    argv += ["--init-from", days["run1"] / checkpoint.BEST]
    with pytest.raises(ValueError, match="does not continue its ids; make --data with"):
        train.run(parse(train, argv))
    assert not (tmp_path / "r").exists()


def test_init_from_and_pretraining_are_exclusive(days, tmp_path):
    argv = ["--data", days["etl2"], "--out", tmp_path / "r", *FAST, "--pretrain", "gmf-mlp"]
    with pytest.raises(ValueError, match="both choose the starting weights"):
        parse(train, [*argv, "--init-from", days["run1"] / checkpoint.BEST]).check()
