"""Training benchmark data: an ETL output directory, or ``ncf synth`` data split in memory.

The synthetic path needs only numpy and torch (it runs on the GPU box, which has no NVTabular):
``datasets.synth.generate`` (ML-20m-like, planted structure), item ids made contiguous, each user's
latest rating held out, and 100 evaluation negatives per user drawn uniformly among the items the
user never rated (with replacement across the 100, as DLE). Cached as .npz under ``work/``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from models.data import EtlData, load_etl
from models.sampling import PositiveSet, sample_negatives

CACHE_DIR = Path("work/bench-train")
_KEYS = ("train_users", "train_items", "test_users", "test_items", "eval_negatives")


def _split(columns: dict[str, np.ndarray], eval_negatives: int, seed: int) -> dict[str, np.ndarray]:
    from ncf import names

    user = columns[names.RAW_USER].astype(np.int64) - 1  # 1..U -> 0..U-1
    _, item = np.unique(columns[names.RAW_ITEM], return_inverse=True)
    order = np.lexsort((columns[names.RAW_TIME], user))  # by user, then time
    user, item = user[order], item[order].astype(np.int64)
    last = np.flatnonzero(np.r_[user[1:] != user[:-1], True])  # each user's latest row
    keep = np.ones(user.size, dtype=bool)
    keep[last] = False
    n_users, n_items = int(user.max()) + 1, int(item.max()) + 1
    pos = PositiveSet(torch.from_numpy(user), torch.from_numpy(item), n_users, n_items)
    gen = torch.Generator().manual_seed(seed)
    test_users = torch.from_numpy(user[last])
    negs = sample_negatives(
        test_users.repeat_interleave(eval_negatives), "exact", pos, (0, n_items), gen
    )
    return {
        "train_users": user[keep],
        "train_items": item[keep],
        "test_users": user[last],
        "test_items": item[last],
        "eval_negatives": negs.numpy().reshape(-1, eval_negatives),
        "num_users": np.int64(n_users),
        "num_items": np.int64(n_items),
    }


def synthetic(
    scale: float, seed: int = 0, eval_negatives: int = 100, cache: Path = CACHE_DIR
) -> Path:
    """Path of the cached split of ``ncf synth`` data at ``scale`` (generated on first use)."""
    path = cache / f"synth-{scale:g}-seed{seed}-neg{eval_negatives}.npz"
    if path.exists():
        return path
    from datasets.synth import SynthConfig, generate
    from ncf.atomic import write_bytes

    arrays = _split(generate(SynthConfig(scale=scale, seed=seed)), eval_negatives, seed)
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
