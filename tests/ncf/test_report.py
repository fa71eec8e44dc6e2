"""The run report's accuracy table: ItemPop, MF and NeuMF rows, sampled and full-ranking columns."""

from __future__ import annotations

import json
from pathlib import Path

from ncf.cli.report import write_report


def _write(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_rows_for_each_ranking_with_full_figures(tmp_path: Path):
    run = tmp_path / "run"
    _write(run / "train" / "metrics.json", {"hr@10": 0.5, "preset": "small", "best_epoch": 5})
    _write(run / "train-mf" / "metrics.json", {"hr@10": 0.4, "preset": "mf-small", "best_epoch": 9})
    neumf = {"hr@10": 0.61, "ndcg@10": 0.35, "full_hr@10": 0.071, "full_ndcg@10": 0.034,
             "full_mrr": 0.031, "itempop_hr@10": 0.41, "itempop_ndcg@10": 0.22,
             "itempop_full_hr@10": 0.044, "itempop_full_ndcg@10": 0.021, "itempop_full_mrr": 0.02,
             "negatives_per_user": 100, "full_candidates_per_user": 9567.2}  # fmt: skip
    _write(run / "evaluation.json", neumf)
    mf = {
        "hr@10": 0.58,
        "ndcg@10": 0.33,
        "full_hr@10": 0.065,
        "full_ndcg@10": 0.032,
        "full_mrr": 0.03,
    }
    _write(run / "evaluation-mf.json", mf)
    s = write_report(run, tmp_path / "etl", run / "train", run / "bench", [], 1.0, Path("r.csv"))
    assert [r["ranking"] for r in s["accuracy"]] == ["ItemPop", "MF", "NeuMF"]
    assert s["accuracy"][0]["full_mrr"] == 0.02 and s["accuracy"][1]["full_hr@10"] == 0.065
    assert s["accuracy"][2]["hr@10"] == 0.61 and s["accuracy"][1]["best_epoch"] == 9
    md = (run / "report.md").read_text()
    assert "| ItemPop | 0.4100 | 0.2200 | 0.0440 | 0.0210 | 0.0200 |" in md
    assert (
        "| MF (preset mf-small, best epoch 9) | 0.5800 | 0.3300 | 0.0650 | 0.0320 | 0.0300 |" in md
    )
    assert (
        "| NeuMF (preset small, best epoch 5) | 0.6100 | 0.3500 | 0.0710 | 0.0340 | 0.0310 |" in md
    )
    assert "100 negatives" in md and "9,567 candidates" in md
    assert json.loads((run / "metrics.json").read_text())["accuracy"] == s["accuracy"]


def test_without_mf_or_full_ranking_the_table_says_n_a(tmp_path: Path):
    run = tmp_path / "run"
    _write(run / "train" / "metrics.json", {"hr@10": 0.5, "ndcg@10": 0.3, "itempop_hr@10": 0.4,
                                            "preset": "small", "best_epoch": 2})  # fmt: skip
    s = write_report(run, tmp_path / "etl", run / "train", run / "bench", [], 1.0, Path("r.csv"))
    assert [r["ranking"] for r in s["accuracy"]] == ["ItemPop", "NeuMF"]
    md = (run / "report.md").read_text()
    assert "| NeuMF (preset small, best epoch 2) | 0.5000 | 0.3000 | n/a | n/a | n/a |" in md


def _per_user(path: Path, greater: list[int], ties: list[int]) -> None:
    import pandas as pd

    n = len(greater)
    frame = {"user_id": list(range(n)), "greater": greater, "ties": ties,
             "itempop_greater": [5] * n, "itempop_ties": [0] * n}  # fmt: skip
    pd.DataFrame(frame).to_parquet(path, index=False)


def test_the_paired_test_and_the_per_user_file_of_the_run(tmp_path: Path):
    import pandas as pd

    from ncf.cli.comparison import PER_USER, per_user_path

    run = tmp_path / "run"
    _write(run / "evaluation.json", {"hr@10": 0.9})
    _write(run / "evaluation-mf.json", {"hr@10": 0.5})
    # NeuMF ranks every user's item first (one tie for user 1); MF half of them outside the top 10
    _per_user(per_user_path(run / "evaluation.json"), [0, 0, 3, 1], [0, 1, 0, 0])
    _per_user(per_user_path(run / "evaluation-mf.json"), [0, 20, 3, 40], [0, 0, 0, 0])
    s = write_report(run, tmp_path / "etl", run / "train", run / "bench", [], 1.0, Path("r.csv"))
    test = s["neumf_vs_mf"]["sampled"]["hr@10"]
    assert test["diff"] == 0.5 and test["users"] == 4 and "full" not in s["neumf_vs_mf"]
    ranks = pd.read_parquet(run / PER_USER)
    assert ranks["neumf_sampled_rank"].tolist() == [0.0, 0.5, 3.0, 1.0]
    assert ranks["mf_sampled_rank"].tolist() == [0.0, 20.0, 3.0, 40.0]
    assert ranks["itempop_sampled_rank"].tolist() == [5.0] * 4
    assert "| sampled | hr@10 | +0.5000 |" in (run / "report.md").read_text()
