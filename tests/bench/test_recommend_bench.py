"""ncf.bench.recommend on a tiny random model: every path's row, and agreement figures that hold by
construction (exact fp32 with itself; a flat index over the whole catalogue)."""

from __future__ import annotations

import json

import pytest

from ncf.bench import entry, recommend
from ncf.core import names
from ncf.models.checkpoint import load_model


def test_rows_and_agreement(tmp_path):
    args = ["--users", "40", "--items", "60", "--batch-sizes", "1", "3", "--requests", "3"]
    args += ["--user-budget", "6", "--quality-users", "8", "--ann-candidates", "10", "60"]
    args += ["--ann-index", "HNSW32", "Flat", "--threads", "1", "--results-dir", str(tmp_path)]
    assert entry.main(recommend, args) == 0
    payload = json.loads((tmp_path / "recommend.json").read_text())
    rows = payload["rows"]
    paths = {(r["path"], r["precision"], r["batch"]) for r in rows}
    assert len(rows) == len(paths) == 2 * 2 * (1 + 2 * 2)  # batches x precisions x paths
    assert all(set(recommend.COLUMNS) - {"max_abs_diff"} <= set(r) for r in rows)
    by = {(r["path"], r["precision"], r["batch"]): r for r in rows}
    assert by[("exact", "fp32", 1)]["topk_vs_exact_fp32"] == 1.0
    assert by[("ann Flat n=60", "fp32", 3)]["topk_vs_exact_fp32"] == 1.0  # every item re-ranked
    assert 0 < by[("exact", "bf16", 1)]["max_abs_diff"] < 0.05
    assert by[("exact", "fp32", 3)]["items_scored_per_s"] == pytest.approx(
        60 * by[("exact", "fp32", 3)]["users_per_s"]
    )
    assert payload["catalogue"] == 60 and (tmp_path / "recommend.md").is_file()


def test_random_checkpoint_fits_the_etl(tmp_path):
    etl = tmp_path / "etl"
    etl.mkdir()
    meta = {
        "num_users": 13,
        "num_items": 17,
        "user_id_range": [3, 13],
        "item_id_range": [3, 17],
        "negatives_per_user": 0,
    }
    (etl / names.METADATA_FILE).write_text(json.dumps(meta))
    ckpt = tmp_path / "random.pt"
    assert entry.main(recommend, ["--make-checkpoint", str(ckpt), "--data", str(etl)]) == 0
    model, state = load_model(ckpt)
    assert (model.cfg.num_users, model.cfg.num_items, model.cfg.mlp_layers) == (
        13,
        17,
        [256, 256, 128, 64],
    )
    assert state["data"]["etl_dir"] == str(etl)
    assert entry.main(recommend, ["--make-checkpoint", str(ckpt)]) == 2  # --data is needed
