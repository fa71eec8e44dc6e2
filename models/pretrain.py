"""NeuMF pretraining (He et al., 2017, section 3.4.1): a GMF and an MLP first, NeuMF from them.

``ncf train --pretrain gmf-mlp`` first trains NeuMF's GMF tower alone and its MLP tower alone
(``NeuMFConfig.towers`` "gmf" / "mlp"), each an ordinary run of the same Trainer on the same
data, early-stopped on validation, into ``RUN/pretrain-gmf`` and ``RUN/pretrain-mlp``
(``ncf.models.train`` runs them). NeuMF then starts from their best epochs (``combine``): the
embeddings and MLP layers copied, the output layer ``[alpha * w_gmf, (1 - alpha) * w_mlp]`` with
bias ``alpha * b_gmf + (1 - alpha) * b_mlp``, so that its first logit is exactly
``alpha * GMF(u, i) + (1 - alpha) * MLP(u, i)``. The paper then trains NeuMF with plain SGD, as
Adam's moments of the towers are not carried over; here NeuMF's Adam starts afresh, at
``--pretrain-lr`` (``TrainConfig.optimizer_lr``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ncf.core import textfile
from ncf.models.presets import TrainConfig
from ncf.models.trainer import METRICS_FILE

TOWER_RUNS = {"gmf": "pretrain-gmf", "mlp": "pretrain-mlp"}  # tower -> its run folder in RUN
FINAL_WEIGHT, FINAL_BIAS = "final.weight", "final.bias"


def tower_config(hp: TrainConfig, tower: str) -> TrainConfig:
    """The settings of ``tower``'s pretraining run: ``hp`` with that tower alone for
    ``pretrain_epochs`` epochs (0: ``hp.epochs``), the pretraining settings at their defaults (a
    plain run: NeuMF runs that differ only in how they use the towers share the same towers)."""
    plain = {
        f: getattr(TrainConfig, f)
        for f in ("pretrain", "pretrain_epochs", "pretrain_alpha", "pretrain_lr")
    }
    return hp.replace(**plain, towers=tower, epochs=hp.pretrain_epochs or hp.epochs)


def combine(
    gmf: dict[str, torch.Tensor], mlp: dict[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """NeuMF's state dict from a GMF tower's and an MLP tower's (the same parameter names).

    ``final.weight`` ``[1, factors + mlp_layers[-1]]`` is ``[alpha * w_gmf, (1 - alpha) * w_mlp]``
    and ``final.bias`` ``[1]`` is ``alpha * b_gmf + (1 - alpha) * b_mlp``; every other tensor is
    copied from the tower that has it.
    """
    towers = {k: v for k, v in (*gmf.items(), *mlp.items()) if not k.startswith("final.")}
    weight = torch.cat((alpha * gmf[FINAL_WEIGHT], (1 - alpha) * mlp[FINAL_WEIGHT]), dim=1)
    bias = alpha * gmf[FINAL_BIAS] + (1 - alpha) * mlp[FINAL_BIAS]
    return {**towers, FINAL_WEIGHT: weight, FINAL_BIAS: bias}


def figures(run_dir: Path, k: int) -> dict:
    """What a pretraining run reached (its ``metrics.json``), for the NeuMF run's metrics.json:
    HR@k / NDCG@k of its kept epoch on the split that chose it (``valid``; ``test`` under DLE's
    protocol, on data without a validation split), the epoch, the epochs run and their seconds."""
    if not (run_dir / METRICS_FILE).is_file():  # removed since: nothing to report
        return {"run": run_dir.name, "missing": True}
    m = textfile.read_json(run_dir / METRICS_FILE)
    split, block = ("valid", m["valid"]) if "valid" in m else ("test", m)
    return {
        "run": run_dir.name,
        "split": split,
        f"hr@{k}": block.get(f"hr@{k}"),
        f"ndcg@{k}": block.get(f"ndcg@{k}"),
        "best_epoch": m.get("best_epoch"),
        "epochs_run": m.get("epochs_run"),
        "time_to_train": m.get("time_to_train"),
    }
