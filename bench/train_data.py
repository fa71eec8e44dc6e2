"""Training benchmark data: an ETL output directory, or ``ncf synth`` data split in memory.

The synthetic path needs numpy, pyarrow and torch, not NVTabular (it runs on the GPU box, which
has none): ``ncf.sources.synth.generate`` (ML-20m-like, planted structure), filtered, encoded and
split by the ETL's own functions (``ncf.workflows``: duplicates and users under ``--min-ratings``
dropped, ids in ascending raw-id order as ``ncf etl --engine pandas``, each user's latest rating
held out, and the ETL's exact evaluation negatives: distinct items the user never rated). Cached
as .npz under ``work/``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ncf.core.config import DEFAULT_SEED
from ncf.models.data import EtlData, load_etl
from ncf.workflows.etl import EtlConfig

# `ncf etl`'s evaluation negatives per user (a dataclass field default)
EVAL_NEGATIVES = EtlConfig.eval_negatives

CACHE_DIR = Path("work/bench-train")
_KEYS = ("train_users", "train_items", "test_users", "test_items", "eval_negatives")


def split(
    columns: dict[str, np.ndarray], eval_negatives: int, seed: int, min_ratings: int | None = None
) -> dict[str, np.ndarray]:
    """The training arrays of raw rating columns, split by the ETL's own functions.

    Parameters
    ----------
    columns
        ``userId``, ``movieId`` and ``timestamp`` arrays (``ncf.sources.synth.generate``'s output).
    eval_negatives
        Evaluation negatives per test user, drawn among the items the user never rated.
    seed
        Seed of the negatives.
    min_ratings
        Users with fewer ratings are dropped (default: ``ncf etl``'s).

    Returns
    -------
    dict
        ``train_users``/``train_items``, ``test_users`` (ascending)/``test_items``, int64
        ``eval_negatives [n_test, eval_negatives]``, ``num_users``, ``num_items``: dense ids in
        ascending raw-id order, as ``ncf etl --engine pandas`` assigns them.
    """
    from ncf.core import names
    from ncf.workflows.encoding import sorted_unique_encoding
    from ncf.workflows.etl import EtlConfig
    from ncf.workflows.partition import Summary, finish, negative_seeds, prepare

    if min_ratings is None:
        min_ratings = EtlConfig.min_ratings  # `ncf etl`'s default (a dataclass field default)
    user = columns[names.RAW_USER]
    cols = {"user": user, "item": columns[names.RAW_ITEM], "time": columns[names.RAW_TIME]}
    cols["row"] = np.arange(user.size, dtype=np.int64)
    # `ncf etl --holdout test --engine pandas`'s steps, in memory (ties: the item id).
    part = prepare(cols, min_ratings, "test")
    summary = Summary.of(part)
    summary.check(f"ncf synth (seed {seed})", min_ratings, "test", eval_negatives)
    encoding = sorted_unique_encoding(summary.users, summary.items)
    rows = finish(part, encoding, eval_negatives, negative_seeds(seed, 1))
    n_users, n_items = encoding.user.size, encoding.item.size
    (train_users, train_items), (test_users, test_items) = rows["train"], rows["test"]
    return {
        "train_users": train_users,
        "train_items": train_items,
        "test_users": test_users,
        "test_items": test_items,
        "eval_negatives": rows["negatives"][1].reshape(n_users, eval_negatives),
        "num_users": np.int64(n_users),
        "num_items": np.int64(n_items),
    }


def synthetic(
    scale: float,
    seed: int = DEFAULT_SEED,
    eval_negatives: int = EVAL_NEGATIVES,
    cache: Path = CACHE_DIR,
) -> Path:
    """Path of the cached split of ``ncf synth`` data at ``scale`` (generated on first use)."""
    # The name holds every input of the split; "etl3": the ETL's split and its per-user negatives.
    path = cache / f"synth-{scale:g}-seed{seed}-neg{eval_negatives}-etl3.npz"
    if path.exists():
        return path
    from ncf.core.atomic import write_bytes
    from ncf.sources.synth import SynthConfig, generate

    arrays = split(generate(SynthConfig(scale=scale, seed=seed)), eval_negatives, seed)
    arrays = {k: (v.astype(np.int32) if k in _KEYS else v) for k, v in arrays.items()}
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())
    return path


def load(path: str | Path, device: torch.device) -> EtlData:
    """An ETL directory (``load_etl``) or a cached ``.npz`` split, as tensors on ``device``."""
    path = Path(path)
    if path.is_dir():
        return load_etl(path, device)
    with np.load(path) as z:
        arrays = {k: torch.from_numpy(z[k]).to(device) for k in _KEYS}
        n_users, n_items = int(z["num_users"]), int(z["num_items"])
    meta = {
        "num_users": n_users,
        "num_items": n_items,
        "item_id_range": [0, n_items],
        "negatives_per_user": int(arrays["eval_negatives"].shape[1]),
        "source": str(path),
    }
    sha = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
    return EtlData(**arrays, metadata=meta, metadata_sha256=sha, path=path)
