"""Train one RecBole model on pre-split atomic files and write its per-epoch curve and test figures.

Run by the peers' interpreter (``.venv-peers/bin/python bench/peers_recbole.py JOB.json``), never
by the project's: it imports only RecBole, torch, numpy and the standard library. ``ncf bench
peers`` (bench/peers.py) writes the job and the atomic files and reads the result back.

The job (JSON)::

    {"data_path": DIR,            # holds DATASET/DATASET.{train,valid,test}.inter
     "dataset": NAME, "model": "NeuMF" | "BPR", "seed": 1, "epochs": 20,
     "params": {...},             # RecBole settings over this file's per-model defaults
     "candidates": FILE | null,   # .npz: {split}_users [U], {split}_items [U, 1+N] (tokens)
     "checkpoint_dir": DIR, "out": RESULT.json}

The result: ``curve`` (one entry per epoch: mean batch loss, training seconds, validation metrics of RecBole's
own protocol), ``best_epoch`` (best validation NDCG@10), ``test`` (scored once, best epoch's
model), ``train_samples_per_epoch``, ``seconds``; with ``candidates``, ``scores_file``: an .npz
of the best model's scores ``{split}_scores [U, 1+N]`` (column 0 the held-out item) for the
project to turn into metrics with its own code.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

# RecBole 1.2.1 reloads its best checkpoint with torch.load; torch >= 2.6 defaults to
# weights_only=True, which refuses RecBole's checkpoint (it pickles its Config).
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
# RecBole 1.2.1 on pandas 2.2 / torch 2.13: deprecation notices of its own code, not of this run.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message=".*weights_only.*")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from recbole.config import Config  # noqa: E402
from recbole.data import create_dataset, data_preparation  # noqa: E402
from recbole.data.interaction import Interaction  # noqa: E402
from recbole.trainer import Trainer  # noqa: E402
from recbole.utils import get_model, init_logger, init_seed  # noqa: E402

# Every setting that is not RecBole's default, per model. NeuMF: DLE-sized (MF 64; MLP
# 256-256-128-64, i.e. 128 per side into hidden 256, 128, 64), dropout 0.5, 4 negatives per
# positive, Adam lr 0.001, batch 2048. BPR: RecBole's defaults (64 dims, 1 negative).
MODEL_PARAMS = {
    "NeuMF": {
        "mf_embedding_size": 64,
        "mlp_embedding_size": 128,
        "mlp_hidden_size": [256, 128, 64],
        "dropout_prob": 0.5,
        "train_neg_sample_args": {"distribution": "uniform", "sample_num": 4},
        "learning_rate": 0.001,
        "train_batch_size": 2048,
    },
    "BPR": {},
}
SCORED_PER_POSITIVE = {"NeuMF": 5, "BPR": 2}  # (user, item) pairs scored per training positive


def recbole_config(job: dict) -> dict:
    """The RecBole config dict of ``job``: the split files as given, 100 uniform evaluation
    negatives (RecBole's draw), selection on validation NDCG@10, no early stop."""
    settings = {
        "data_path": job["data_path"],
        "benchmark_filename": ["train", "valid", "test"],
        "USER_ID_FIELD": "user_id",
        "ITEM_ID_FIELD": "item_id",
        "load_col": {"inter": ["user_id", "item_id"]},
        "eval_args": {"group_by": "user", "order": "RO", "mode": "uni100"},
        "metrics": ["Hit", "NDCG"],
        "topk": [10],
        "valid_metric": "NDCG@10",
        "metric_decimal_place": 6,
        "epochs": job["epochs"],
        "stopping_step": job["epochs"] + 1,  # the epoch is chosen on validation, not stopped
        "eval_step": 1,
        "seed": job["seed"],
        "reproducibility": True,
        "use_gpu": torch.cuda.is_available(),
        "checkpoint_dir": job["checkpoint_dir"],
        "show_progress": False,
        "state": "WARNING",
        "worker": 0,
    }
    return {**settings, **MODEL_PARAMS[job["model"]], **job.get("params", {})}


class RecordingTrainer(Trainer):
    """RecBole's Trainer, recording each epoch's train loss, seconds and validation metrics."""

    def __init__(self, config, model):
        super().__init__(config, model)
        self.curve: list[dict] = []

    def _train_epoch(self, train_data, epoch_idx, loss_func=None, show_progress=False):
        t0 = time.perf_counter()
        loss = super()._train_epoch(train_data, epoch_idx, loss_func, show_progress)
        total = float(sum(loss) if isinstance(loss, tuple) else loss)  # summed over batches
        self.curve.append(
            {"epoch": epoch_idx + 1, "train_loss": total / len(train_data),
             "train_seconds": time.perf_counter() - t0}
        )  # fmt: skip
        return loss

    def _valid_epoch(self, valid_data, show_progress=False):
        score, result = super()._valid_epoch(valid_data, show_progress)
        self.curve[-1]["valid"] = {k: float(v) for k, v in result.items()}
        return score, result


def score_candidates(model, dataset, candidates: Path, out: Path) -> dict:
    """Scores ``[U, 1+N]`` of the given (user, items) token rows per split; a token RecBole does
    not know (no interaction in any split) scores -inf."""
    arrays = np.load(candidates)
    uid, iid = dataset.uid_field, dataset.iid_field
    result, missing = {}, {}
    model.eval()
    for split in ("valid", "test"):
        if f"{split}_users" not in arrays:
            continue
        users, items = arrays[f"{split}_users"], arrays[f"{split}_items"]
        u = np.array([dataset.field2token_id[uid].get(str(t), -1) for t in users])
        flat = [dataset.field2token_id[iid].get(str(t), -1) for t in items.ravel()]
        i = np.array(flat).reshape(items.shape)
        known = (i >= 0) & (u[:, None] >= 0)
        scores = np.full(items.shape, -np.inf, dtype=np.float64)
        with torch.no_grad():
            for lo in range(0, len(u), 256):  # 256 users x (1+N) candidates per predict call
                uu = np.repeat(u[lo : lo + 256], items.shape[1])
                ii = i[lo : lo + 256].ravel()
                batch = Interaction({uid: torch.from_numpy(np.maximum(uu, 0)),
                                     iid: torch.from_numpy(np.maximum(ii, 0))})  # fmt: skip
                s = model.predict(batch.to(model.device)).float().cpu().numpy()
                scores[lo : lo + 256] = s.reshape(-1, items.shape[1])
        scores[~known] = -np.inf
        result[f"{split}_scores"] = scores
        missing[split] = int((~known).sum())
    np.savez(out, **result)
    return missing


def run(job: dict) -> dict:
    """Train ``job["model"]`` once, select the best validation epoch, test it once."""
    t0 = time.perf_counter()
    config = Config(model=job["model"], dataset=job["dataset"], config_dict=recbole_config(job))
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    init_seed(config["seed"] + config["local_rank"], config["reproducibility"])
    model = get_model(config["model"])(config, train_data._dataset).to(config["device"])
    trainer = RecordingTrainer(config, model)
    trainer.fit(train_data, valid_data, saved=True, show_progress=False)
    test = trainer.evaluate(test_data, load_best_model=True, show_progress=False)
    best = max(trainer.curve, key=lambda e: e["valid"]["ndcg@10"])
    n_train = len(train_data._dataset)
    result = {
        "model": job["model"],
        "seed": job["seed"],
        "recbole_config": {k: config[k] for k in recbole_config(job) if k != "data_path"},
        "n_users": dataset.user_num - 1,  # RecBole's id 0 is padding
        "n_items": dataset.item_num - 1,
        "train_interactions": n_train,
        "train_samples_per_epoch": n_train * SCORED_PER_POSITIVE[job["model"]],
        "curve": trainer.curve,
        "best_epoch": best["epoch"],
        "valid": best["valid"],
        "test": {k: float(v) for k, v in test.items()},
    }
    if job.get("candidates"):
        scores_file = Path(job["out"]).with_suffix(".scores.npz")
        result["unknown_candidates"] = score_candidates(
            trainer.model, dataset, Path(job["candidates"]), scores_file
        )
        result["scores_file"] = str(scores_file)
    Path(trainer.saved_model_file).unlink(missing_ok=True)  # the best epoch's checkpoint
    result["seconds"] = time.perf_counter() - t0
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: peers_recbole.py JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    sys.argv = sys.argv[:1]  # RecBole's Config would read the job's path as its own flags
    result = run(job)
    Path(job["out"]).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
