"""Test inputs in the formats of docs/ARCHITECTURE.md, built here until tests can use `ncf etl`/`train`.

- ``make_etl_dir``: an ETL output directory whose ``workflow/`` is a real NVTabular Workflow
  (Categorify of userId and movieId fit on the ratings, saved with ``Workflow.save``), with
  leave-one-out ``train/``/``test/`` parquet and ``metadata.json``.
- ``make_checkpoint``: a randomly initialised small NeuMF saved in the checkpoint format. Serving
  correctness needs no trained model; the embeddings are widened so that scores spread out and
  rankings have no near-ties.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ncf.core import names
from ncf.models.neumf import NeuMF, NeuMFConfig

RATINGS = Path(__file__).resolve().parents[2] / "data" / "ml-latest-small" / "ratings.csv"
RESERVED = 3  # Categorify codes 0, 1, 2: padding, null, out-of-vocabulary


@contextlib.contextmanager
def quiet_merlin() -> Iterator[None]:
    """Silence Merlin's CPU-mode and TensorFlow notices, also when used outside pytest."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CPU mode.*experimental", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*[Tt]ensor[Ff]low", category=UserWarning)
        yield


def load_workflow(etl_dir: Path):
    """The saved Workflow of ``etl_dir`` (imports NVTabular)."""
    with quiet_merlin():
        import nvtabular as nvt

        return nvt.Workflow.load(str(etl_dir / names.WORKFLOW_DIR))


def transform(
    workflow, raw_users: np.ndarray, raw_items: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``Workflow.transform`` of raw ids: (user codes, item codes) as int64 arrays.

    The output columns are the raw names (this fixture's workflow) or, after a ``Rename``,
    ``user_id``/``item_id`` (the workflow of ``ncf etl``).
    """
    with quiet_merlin():
        from merlin.io import Dataset

        frame = pd.DataFrame({names.RAW_USER: raw_users, names.RAW_ITEM: raw_items})
        out = workflow.transform(Dataset(frame, cpu=True)).to_ddf().compute()
    user = names.USER if names.USER in out.columns else names.RAW_USER
    item = names.ITEM if names.ITEM in out.columns else names.RAW_ITEM
    return out[user].to_numpy(np.int64), out[item].to_numpy(np.int64)


def synthetic_ratings(n_users: int, n_items: int, per_user: int, seed: int = 0) -> pd.DataFrame:
    """A small ratings frame: sparse raw ids (not 0..n-1), ``per_user`` distinct items per user."""
    rng = np.random.default_rng(seed)
    raw_users = np.sort(rng.choice(10 * n_users, n_users, replace=False)) + 1
    raw_items = np.sort(rng.choice(100 * n_items, n_items, replace=False)) + 1
    rows = [
        (u, i, 4.0, int(t))
        for u in raw_users
        for t, i in enumerate(rng.choice(raw_items, per_user, replace=False))
    ]
    return pd.DataFrame(rows, columns=list(names.RAW_COLUMNS))


def make_etl_dir(out: Path, ratings: Path | pd.DataFrame = RATINGS) -> Path:
    """Fit and save a Categorify workflow on ``ratings`` and write an ETL-format directory."""
    df = ratings if isinstance(ratings, pd.DataFrame) else pd.read_csv(ratings)
    raw = df[[names.RAW_USER, names.RAW_ITEM]]
    with quiet_merlin():
        import nvtabular as nvt
        from merlin.io import Dataset

        # out_path: Categorify writes its fit files under ./categories by default
        cat = nvt.ops.Categorify(out_path=str(out / ".fit"))
        workflow = nvt.Workflow([names.RAW_USER, names.RAW_ITEM] >> cat)
        workflow.fit(Dataset(raw, cpu=True))
        workflow.save(str(out / names.WORKFLOW_DIR))
    users, items = transform(
        workflow, raw[names.RAW_USER].to_numpy(), raw[names.RAW_ITEM].to_numpy()
    )
    pairs = pd.DataFrame({names.USER: users, names.ITEM: items, "t": df[names.RAW_TIME].to_numpy()})
    latest = pairs.sort_values(["t", names.ITEM]).groupby(names.USER).tail(1).index
    for sub, part in ((names.TEST_DIR, pairs.loc[latest]), (names.TRAIN_DIR, pairs.drop(latest))):
        (out / sub).mkdir(parents=True)
        part[[names.USER, names.ITEM]].to_parquet(out / sub / "part_0.parquet", index=False)
    cards = {c.name: c.properties["embedding_sizes"]["cardinality"] for c in workflow.output_schema}
    meta = {
        "num_users": int(cards[names.RAW_USER]),
        "num_items": int(cards[names.RAW_ITEM]),
        "user_id_range": [RESERVED, int(cards[names.RAW_USER])],
        "item_id_range": [RESERVED, int(cards[names.RAW_ITEM])],
        "n_users": int(df[names.RAW_USER].nunique()),
        "n_items": int(df[names.RAW_ITEM].nunique()),
        "negatives_per_user": 0,  # serving reads no negatives
        "vocab": {
            "user": f"{names.WORKFLOW_DIR}/categories/unique.{names.RAW_USER}.parquet",
            "item": f"{names.WORKFLOW_DIR}/categories/unique.{names.RAW_ITEM}.parquet",
        },
    }
    (out / names.METADATA_FILE).write_text(json.dumps(meta, indent=2))
    return out


def make_checkpoint(path: Path, etl_dir: Path, seed: int = 0) -> Path:
    """Save a random small NeuMF for ``etl_dir`` in the training checkpoint format."""
    meta_path = etl_dir / names.METADATA_FILE
    meta = json.loads(meta_path.read_text())
    torch.manual_seed(seed)
    cfg = NeuMFConfig(meta["num_users"], meta["num_items"], factors=8, mlp_layers=[16, 8])
    model = NeuMF(cfg)
    with torch.no_grad():
        for emb in (
            model.mf_user_embed,
            model.mf_item_embed,
            model.mlp_user_embed,
            model.mlp_item_embed,
        ):
            emb.weight.normal_(0.0, 0.7)  # DLE's N(0, 0.01) makes every score ~0.5
    torch.save(
        {
            "model": model.state_dict(),
            "config": cfg.to_dict(),
            "epoch": 0,
            "metrics": {"hr@10": 0.0, "ndcg@10": 0.0},
            "data": {
                "etl_dir": str(etl_dir),
                "metadata_sha256": hashlib.sha256(meta_path.read_bytes()).hexdigest(),
            },
        },
        path,
    )
    return path
