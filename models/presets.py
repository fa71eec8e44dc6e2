"""Training hyperparameters (``TrainConfig``: what to learn) and the presets that set them.

``TrainConfig`` is the ``hp`` of every stage that trains (``ncf train``, ``ncf tune``): its flags
are generated flat (``--lr``), with DLE's short aliases (``-b -n -l -f``). A preset is a base layer
over its defaults (``ncf train --preset``; ``ncf.core.config`` orders the layers). How each preset
was chosen (its search, trial counts and validation figures): docs/PRESETS.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.core.names import GRAD_COMPRESSIONS
from ncf.models.kinds import MODELS, config_class
from ncf.models.neumf import DROPOUT_AT, LINEAR_INITS, TOWERS
from ncf.models.sampling import SAMPLING_MODES

# Default per-rank micro-batch cap on a CPU (``--micro-batch 0``): docs/PRESETS.md, "CPU micro-batch".
CPU_MICRO_BATCH = 48 << 10
DEFAULT_TOPK = 10  # K of HR@K / NDCG@K
DEFAULT_EVAL_BATCH = 1 << 20  # samples scored at once in evaluation (DLE --valid_batch_size)
DEFAULT_PRESET = "dle"
PRETRAIN_MODES = ("none", "gmf-mlp")  # NeuMF from scratch, or from a GMF and an MLP (pretrain.py)
# The training loss: pointwise BCE on every sample (DLE, He et al.), or a softmax cross-entropy
# of each positive against its own negatives (a sampled softmax; Trainer.step).
LOSSES = ("bce", "softmax")


@dataclass
class TrainConfig(Config):
    """Everything that determines a training run's result (plus a few speed knobs)."""

    epochs: int = setting(30, help="epochs")
    batch_size: int = setting(1 << 20, alias="-b", help="global batch, split across ranks")
    eval_batch_size: int = setting(DEFAULT_EVAL_BATCH, help="samples scored at once in evaluation")
    negatives: int = setting(4, alias="-n", help="training negatives per positive")
    loss: str = setting(
        "bce",
        choices=LOSSES,
        help="bce: binary cross-entropy of every sample (DLE); softmax: cross-entropy of each "
        "positive against its --negatives own negatives (the global batch rounded down to whole "
        "groups)",
    )
    lr: float = setting(0.0045, alias="-l", help="Adam learning rate")
    # The learning-rate rule (``lr_at``), one for every batch size: --lr holds at --lr-batch and
    # scales by the square root of the batch ratio (Adam's rule: the update's noise falls with
    # the square root of the batch), after a linear warm-up over --warmup-epochs.
    lr_batch: int = setting(
        0,
        help="global batch at which --lr holds; other batches scale it by sqrt(--batch-size / "
        "--lr-batch) (0: --lr at every batch)",
    )
    warmup_epochs: float = setting(
        0.0, help="the lr rises linearly from 0 over the first N epochs (fractions allowed)"
    )
    beta1: float = setting(0.25, help="Adam beta1")
    beta2: float = setting(0.5, help="Adam beta2")
    eps: float = setting(1e-8, help="Adam epsilon")
    # NeuMF's own hyperparameters, under NeuMFConfig's names (``model_config`` builds it).
    factors: int = setting(64, alias="-f", help="embedding width (NeuMF: of GMF)")
    mlp_layers: list[int] = setting(
        default_factory=lambda: [256, 256, 128, 64],
        alias="--layers",
        help="NeuMF: MLP widths, the first = the user+item MLP embedding",
    )
    dropout: float = setting(0.5, help="NeuMF: MLP dropout rate")
    dropout_at: str = setting(
        "relu",
        choices=DROPOUT_AT,
        help="NeuMF: dropout after each MLP ReLU (relu, DLE) or before each MLP Linear (input, "
        "RecBole: the MLP embeddings dropped out too)",
    )
    linear_init: str = setting(
        "dle",
        choices=LINEAR_INITS,
        help="NeuMF: Linear layers Glorot/LeCun uniform (dle) or nn.Linear's default (torch, RecBole)",
    )
    towers: str = setting(
        "both",
        choices=TOWERS,
        help="NeuMF: both towers, or the GMF or the MLP tower alone (He et al.'s GMF and MLP)",
    )
    # NeuMF pretraining (models/pretrain.py): one GMF and one MLP run first, NeuMF from them.
    pretrain: str = setting(
        "none",
        choices=PRETRAIN_MODES,
        help="NeuMF: gmf-mlp trains a GMF and an MLP first (each early-stopped on validation, "
        "RUN/pretrain-gmf, RUN/pretrain-mlp) and starts NeuMF from their best epochs",
    )
    pretrain_epochs: int = setting(
        0, help="most epochs of each pretraining run (0: --epochs); --patience stops them too"
    )
    pretrain_alpha: float = setting(
        0.5,
        help="the pretrained NeuMF's output: alpha x GMF's logit + (1 - alpha) x MLP's, in 0..1",
    )
    pretrain_lr: float = setting(
        0.0, help="Adam lr of NeuMF after pretraining (0: --lr; the towers train with --lr)"
    )
    topk: int = setting(DEFAULT_TOPK, help="K of HR@K / NDCG@K")
    threshold: float = setting(
        1.0,
        help="stop once the selection HR@K reaches this (the default 1.0: only a perfect HR@K; "
        "above 1: never)",
    )
    patience: int = setting(
        0,
        help="stop after N epochs without a better selection HR@K (validation HR@K when the ETL "
        "has valid/); 0 = off",
    )
    min_epochs: int = setting(
        0,
        help="--patience stops no run before this many epochs (a plateau early in training "
        "is not the peak); 0 = from the first",
    )
    grad_accumulation: int = setting(1, help="micro-batches per optimizer step")
    micro_batch: int = setting(
        0,
        help="cap on the per-rank micro-batch; more accumulation steps if needed, same gradient "
        f"(0 = auto: {CPU_MICRO_BATCH} on CPU, none on CUDA)",
    )
    negative_sampling: str = setting(
        "exact",
        choices=SAMPLING_MODES,
        help="training negatives: exact (never a known positive) or approximate (DLE's uniform draw)",
    )
    grad_compression: str = setting(
        "none",
        choices=GRAD_COMPRESSIONS,
        help="DDP gradient all-reduce: none (fp32) or cast to fp16/bf16 (half the bytes; several "
        "processes only; bf16 needs a backend that sums it: not gloo in torch 2.1)",
    )
    # The moving average's span is set in epochs, so that it means the same on data of any
    # size (models/averaging.py, ``ema_decay``).
    ema_epochs: float = setting(
        0.0,
        help="evaluate, select and save a moving average of the weights over about the last N "
        "epochs (its decay per step: 1 - 1 / (N x steps per epoch)); 0: off, the weights themselves",
    )
    seed: int = setting(DEFAULT_SEED, help="seed of every random draw")
    model: str = setting(
        "neumf", choices=sorted(MODELS), help="neumf, or mf (the dot-product MF baseline)"
    )
    # Both models: an L2 term added to the summed BCE (models/neumf.py, models/mf.py).
    l2: float = setting(
        0.0, help="per-example L2 coefficient on the batch's embedding rows (MF: biases too)"
    )
    # MF's own hyperparameter (models/mf.py); ``factors`` is its embedding width.
    init_std: float = setting(0.1, help="MF: embedding init standard deviation")

    def model_config(self, num_users: int, num_items: int) -> Any:
        """The config of the ``model`` these settings describe, for tables of the given sizes."""
        cls = config_class(self.model)
        model_fields = {f.name for f in fields(cls)} - {"num_users", "num_items"}
        values = {k: v for k, v in self.to_dict().items() if k in model_fields}
        return cls(num_users=num_users, num_items=num_items, **values)

    def optimizer_lr(self) -> float:
        """Adam's learning rate: ``pretrain_lr`` for a NeuMF that was pretrained (when > 0)."""
        return self.pretrain_lr if self.pretrain != "none" and self.pretrain_lr > 0 else self.lr

    def ema_decay(self, steps_per_epoch: int) -> float:
        """The moving average's decay per optimizer step (0: no average)."""
        return max(0.0, 1.0 - 1.0 / (self.ema_epochs * steps_per_epoch)) if self.ema_epochs else 0.0

    def lr_at(self, step: int, steps_per_epoch: int) -> float:
        """Adam's learning rate at optimizer step ``step`` (0-based, counted over all epochs).

        ``optimizer_lr()``, times ``sqrt(batch_size / lr_batch)`` when ``lr_batch`` is set, times
        ``(step + 1) / (warmup_epochs * steps_per_epoch)`` during the warm-up. A pure function of
        the step: a resumed run continues the schedule without state of its own.
        """
        lr = self.optimizer_lr()
        if self.lr_batch > 0:
            lr *= math.sqrt(self.batch_size / self.lr_batch)
        warm = self.warmup_epochs * steps_per_epoch
        if step + 1 < warm:
            lr *= (step + 1) / warm
        return lr

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value."""
        positive = ("epochs", "batch_size", "eval_batch_size", "factors", "topk")
        for name in (*positive, "grad_accumulation"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if min(self.negatives, self.micro_batch, self.patience, self.min_epochs) < 0:
            raise ValueError(
                f"--negatives {self.negatives} / --micro-batch {self.micro_batch} / --patience "
                f"{self.patience} / --min-epochs {self.min_epochs}: must be >= 0"
            )
        if not (self.lr > 0 and 0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.eps > 0):
            raise ValueError(
                f"Adam lr={self.lr} betas=({self.beta1}, {self.beta2}) eps={self.eps}: need lr>0, 0<=beta<1, eps>0"
            )
        config_class(self.model)  # raises for an unknown kind
        if self.lr_batch < 0 or self.warmup_epochs < 0:
            raise ValueError(
                f"--lr-batch {self.lr_batch} / --warmup-epochs {self.warmup_epochs}: need >= 0"
            )
        if not 0 <= self.ema_epochs < math.inf:
            raise ValueError(f"--ema-epochs {self.ema_epochs}: use a span >= 0 epochs (0: off)")
        if self.l2 < 0 or self.init_std <= 0:
            raise ValueError(f"--l2 {self.l2} / --init-std {self.init_std}: need >= 0 / > 0")
        if self.grad_compression not in GRAD_COMPRESSIONS:
            raise ValueError(
                f"--grad-compression {self.grad_compression!r}: use one of {GRAD_COMPRESSIONS}"
            )
        self._check_pretrain()
        if self.loss not in LOSSES or (self.loss == "softmax" and self.negatives < 1):
            raise ValueError(
                f"--loss {self.loss!r} with --negatives {self.negatives}: use one of {LOSSES}; "
                "softmax needs --negatives >= 1"
            )
        if self.negative_sampling not in SAMPLING_MODES:
            raise ValueError(
                f"--negative-sampling {self.negative_sampling!r}: use one of {SAMPLING_MODES}"
            )

    def _check_pretrain(self) -> None:
        """Raise ValueError for pretraining settings that cannot be run."""
        if self.towers not in TOWERS or self.pretrain not in PRETRAIN_MODES:
            raise ValueError(
                f"--towers {self.towers!r} / --pretrain {self.pretrain!r}: use one of {TOWERS} "
                f"/ {PRETRAIN_MODES}"
            )
        if self.pretrain != "none" and (self.model != "neumf" or self.towers != "both"):
            raise ValueError(
                f"--pretrain {self.pretrain} with --model {self.model} --towers {self.towers}: "
                "pretraining builds a NeuMF with both towers; use --model neumf --towers both"
            )
        if self.pretrain_epochs < 0 or self.pretrain_lr < 0 or not 0 <= self.pretrain_alpha <= 1:
            raise ValueError(
                f"--pretrain-epochs {self.pretrain_epochs} / --pretrain-lr {self.pretrain_lr} / "
                f"--pretrain-alpha {self.pretrain_alpha}: need >= 0 / >= 0 / 0..1"
            )


# Each preset: TrainConfig fields over the defaults. How they were chosen: docs/PRESETS.md.
PRESETS: dict[str, dict] = {
    DEFAULT_PRESET: {},  # DLE's defaults
    "small": {  # data of hundreds of users and ~100k ratings; what `ncf run` trains
        "epochs": 40,  # at most: early stopping on validation ends it (patience)
        "patience": 4,
        "min_epochs": 10,  # past the plateau near ItemPop of the first epochs (docs/PRESETS.md)
        "batch_size": 4096,
        "eval_batch_size": 1 << 16,
        "negatives": 5,
        "lr": 0.001485,
        "beta1": 0.9,
        "beta2": 0.999,
        "factors": 128,
        "dropout": 0.12,
        "mlp_layers": [64, 32],  # one hidden layer: 32 per side into 32 (docs/PRESETS.md)
        "l2": 1e-5,
        "ema_epochs": 3.0,  # evaluate the weights' moving average over about 3 epochs
    },
    "mf-small": {  # the MF baseline (docs/BASELINES.md) for ml-latest-small-sized data
        "model": "mf",
        "epochs": 40,
        "patience": 4,
        "batch_size": 4096,
        "eval_batch_size": 1 << 16,
        "negatives": 8,
        "lr": 0.0132,
        "beta1": 0.9,
        "beta2": 0.999,
        "factors": 128,
        "l2": 0.00553,
    },
}


def preset_values(preset: str) -> dict[str, Any]:
    """The TrainConfig fields ``preset`` sets; ValueError naming the presets."""
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r}: use one of {sorted(PRESETS)}")
    return dict(PRESETS[preset])


def preset_config(preset: str, **overrides: Any) -> TrainConfig:
    """The preset's TrainConfig with ``overrides`` (TrainConfig fields) applied; checked."""
    cfg = TrainConfig.from_dict({**preset_values(preset), **overrides}, f"--preset {preset}")
    cfg.check()
    return cfg
