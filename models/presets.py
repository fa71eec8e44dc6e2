"""Training hyperparameters: DLE's defaults (preset ``dle``), small-data presets, config files.

Layers, each overriding the one before field by field: ``TrainConfig``'s defaults, the chosen
preset, a ``--config FILE`` (``read_config_file``; what ``ncf tune`` writes), then the flags that
were given. The resolved configuration is logged and saved with every checkpoint.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ncf.core.atomic import write_json
from ncf.models.kinds import MODELS, config_class
from ncf.models.sampling import SAMPLING_MODES

CONFIG_FORMAT = "ncf-train-config/1"  # the "format" entry of a config file


@dataclass
class TrainConfig:
    """Everything that determines a training run's result (plus a few speed knobs)."""

    epochs: int = 30
    batch_size: int = 1 << 20  # global batch, split across ranks (DLE -b 1048576)
    eval_batch_size: int = 1 << 20  # samples scored at once in evaluation (DLE --valid_batch_size)
    negatives: int = 4  # training negatives per positive (DLE -n)
    lr: float = 0.0045
    beta1: float = 0.25
    beta2: float = 0.5
    eps: float = 1e-8
    # NeuMF's own hyperparameters, under NeuMFConfig's names (``model_config`` builds it).
    factors: int = 64
    mlp_layers: list[int] = field(default_factory=lambda: [256, 256, 128, 64])
    dropout: float = 0.5
    topk: int = 10
    threshold: float = 1.0  # stop once HR@topk >= threshold (1.0 never stops early, as DLE)
    patience: int = 0  # stop after this many epochs without a better selection metric; 0 = off
    grad_accumulation: int = 1  # micro-batches per optimizer step (DLE --grads_accumulated)
    micro_batch: int = 0  # largest micro-batch per rank; 0 = auto (48Ki on CPU, none on CUDA)
    negative_sampling: str = "exact"  # one of ncf.models.sampling.SAMPLING_MODES
    seed: int = 1
    model: str = "neumf"  # a kind of ncf.models.kinds.MODELS
    # MF's own hyperparameters (models/mf.py); ``factors`` is its embedding width.
    l2: float = 0.0
    init_std: float = 0.1

    def to_dict(self) -> dict:
        """Plain dict (ints, floats, strs, lists) safe for ``torch.load(weights_only=True)``."""
        return asdict(self)

    def model_config(self, num_users: int, num_items: int) -> Any:
        """The config of the ``model`` these settings describe, for tables of the given sizes."""
        cls = config_class(self.model)
        model_fields = {f.name for f in fields(cls)} - {"num_users", "num_items"}
        values = {k: v for k, v in self.to_dict().items() if k in model_fields}
        return cls(num_users=num_users, num_items=num_items, **values)

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value."""
        positive = (
            "epochs",
            "batch_size",
            "eval_batch_size",
            "factors",
            "topk",
            "grad_accumulation",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.negatives < 0 or self.micro_batch < 0 or self.patience < 0:
            raise ValueError(
                f"--negatives {self.negatives} / --micro-batch {self.micro_batch} / --patience "
                f"{self.patience}: must be >= 0"
            )
        if not (self.lr > 0 and 0 <= self.beta1 < 1 and 0 <= self.beta2 < 1 and self.eps > 0):
            raise ValueError(
                f"Adam lr={self.lr} betas=({self.beta1}, {self.beta2}) eps={self.eps}: need lr>0, 0<=beta<1, eps>0"
            )
        config_class(self.model)  # raises for an unknown kind
        if self.l2 < 0 or self.init_std <= 0:
            raise ValueError(f"--l2 {self.l2} / --init-std {self.init_std}: need >= 0 / > 0")
        if self.negative_sampling not in SAMPLING_MODES:
            raise ValueError(
                f"--negative-sampling {self.negative_sampling!r}: use one of {SAMPLING_MODES}"
            )


# Preset ``small``: for ml-latest-small-sized data (hundreds of users, ~100k ratings). The best
# trial of `ncf tune --preset small --epochs 12 --trials 24 --startup-trials 6 --enqueue-base`
# (TPE seed 1, median pruning) on ml-latest-small with `ncf etl`'s validation split (each user's
# second-latest rating, 100 negatives; the test split never read): 24 trials, 17 complete, 7
# pruned, 1 killed and re-run. Search space (models/tune.py SEARCH_SPACES["neumf"]): lr 1e-4..2e-2
# (log), batch {2048, 4096, 8192, 16384}, negatives 2..10, factors {8, 16, 32, 64}, dropout
# 0..0.5; the rest as before (DLE's layers, Adam betas (0.9, 0.999)). Validation HR@10 0.754 at
# its 4th epoch, the last kept; the previous preset (lr 0.0045, batch 8192, 4 negatives, dropout
# 0.5, 8 epochs), queued as one trial, reached 0.746. lr and dropout rounded to 3 and 2 digits.
# What it reaches on test and on data it was not tuned on: README, "Accuracy".
PRESETS: dict[str, dict] = {
    "dle": {},
    "small": {
        "epochs": 4,
        "batch_size": 4096,
        "eval_batch_size": 1 << 16,
        "negatives": 10,
        "lr": 0.00285,
        "beta1": 0.9,
        "beta2": 0.999,
        "dropout": 0.08,
    },
    # MF baseline (docs/BASELINES.md) for ml-latest-small-sized data: the best trial of
    # `ncf tune --model mf --preset mf-small --epochs 10 --trials 8 --startup-trials 3` (TPE seed 1;
    # 6 trials complete, 2 pruned) on ml-latest-small with a validation split (each user's
    # second-latest rating, 100 negatives; written by tests/models/valid_split.py until the ETL
    # writes one): validation HR@10 0.743 at its 10th epoch, the last. Its lr and l2
    # rounded to 3 digits; Adam betas and the N(0, 0.1) init as in the search's base.
    "mf-small": {
        "model": "mf",
        "epochs": 10,
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


def resolve(preset: str, overrides: dict) -> TrainConfig:
    """The preset's config, then ``overrides["config"]`` (a config file) if set, then every other
    non-None entry of ``overrides`` that names a field (the flags); checked."""
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r}: use one of {sorted(PRESETS)}")
    values = {**PRESETS[preset]}
    if overrides.get("config") is not None:
        values.update(read_config_file(overrides["config"]))
    names = {f.name for f in fields(TrainConfig)}
    values.update({k: v for k, v in overrides.items() if k in names and v is not None})
    cfg = TrainConfig(**values)
    cfg.check()
    return cfg


def _checked(name: str, value: Any, where: str) -> Any:
    """``value`` if it has the JSON type of TrainConfig field ``name`` (ints pass as floats)."""
    default = getattr(TrainConfig(), name)
    if isinstance(default, float) and type(value) is int:  # JSON writes 1.0 as 1 in places
        value = float(value)
    if isinstance(default, list):
        ok = isinstance(value, list) and all(type(x) is int for x in value)
    else:
        ok = type(value) is type(default)  # bool is not an int here
    if not ok:
        raise ValueError(
            f"{where}: {name}={value!r} must be {type(default).__name__} (like the default {default!r})"
        )
    return value


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The TrainConfig fields of a config file (``write_config_file``'s format), type-checked.

    The file is a JSON object ``{"format": CONFIG_FORMAT, "config": {field: value, ...},
    "about": {...}}``; ``config`` may hold any subset of the fields, ``about`` is free-form and
    ignored here (``ncf tune`` records its search there).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file (`ncf tune` writes OUT/best.json)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"--config {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != CONFIG_FORMAT:
        raise ValueError(
            f'--config {path}: needs {{"format": "{CONFIG_FORMAT}", "config": {{..}}}}'
        )
    extra = sorted(set(doc) - {"format", "config", "about"})
    if extra or not isinstance(doc.get("config"), dict):
        raise ValueError(f'--config {path}: unknown keys {extra} or no "config" object')
    names = sorted(f.name for f in fields(TrainConfig))
    for key in doc["config"]:
        if key not in names:
            raise ValueError(f"--config {path}: unknown setting {key!r}; settings are {names}")
    return {k: _checked(k, v, f"--config {path}") for k, v in doc["config"].items()}


def write_config_file(path: str | Path, config: dict[str, Any], about: dict | None = None) -> None:
    """Write TrainConfig fields as a config file for ``ncf train --config`` (atomically)."""
    write_json(path, {"format": CONFIG_FORMAT, "config": config, "about": about or {}})


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The hyperparameter flags (all default to None = take the preset's value)."""
    d = TrainConfig()
    p.add_argument(
        "--preset",
        default="dle",
        choices=sorted(PRESETS),
        help="hyperparameter preset (default: %(default)s = DLE's defaults)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="JSON file of settings applied over the preset (flags still override); "
        "`ncf tune` writes one (OUT/best.json)",
    )
    p.add_argument(
        "--model",
        choices=sorted(MODELS),
        help=f"neumf or mf (dot-product MF baseline; default: {d.model})",
    )
    p.add_argument("--epochs", type=int, help=f"epochs (dle: {d.epochs})")
    p.add_argument(
        "-b",
        "--batch-size",
        type=int,
        help=f"global batch, split across ranks (dle: {d.batch_size})",
    )
    p.add_argument(
        "--eval-batch-size",
        type=int,
        help=f"samples scored at once in evaluation (dle: {d.eval_batch_size})",
    )
    p.add_argument(
        "-n", "--negatives", type=int, help=f"training negatives per positive (dle: {d.negatives})"
    )
    p.add_argument("-l", "--lr", type=float, help=f"Adam learning rate (dle: {d.lr})")
    p.add_argument("--beta1", type=float, help=f"Adam beta1 (dle: {d.beta1})")
    p.add_argument("--beta2", type=float, help=f"Adam beta2 (dle: {d.beta2})")
    p.add_argument("--eps", type=float, help=f"Adam epsilon (dle: {d.eps})")
    p.add_argument("-f", "--factors", type=int, help=f"GMF embedding width (dle: {d.factors})")
    p.add_argument(
        "--layers",
        dest="mlp_layers",
        type=int,
        nargs="+",
        help="MLP widths, first = user+item MLP embedding (dle: 256 256 128 64)",
    )
    p.add_argument("--dropout", type=float, help=f"dropout after each MLP ReLU (dle: {d.dropout})")
    p.add_argument("--topk", type=int, help=f"K of HR@K / NDCG@K (dle: {d.topk})")
    p.add_argument("--threshold", type=float, help="stop once HR@K reaches this (dle: 1.0 = never)")
    p.add_argument(
        "--patience",
        type=int,
        help="stop after N epochs without a better selection HR@K (validation HR@K when the ETL "
        "has valid/); default 0 = off",
    )
    p.add_argument(
        "--grad-accumulation", type=int, help="micro-batches per optimizer step (dle: 1)"
    )
    p.add_argument(
        "--micro-batch",
        type=int,
        help="cap on the per-rank micro-batch; more accumulation "
        "steps if needed, same gradient (default 0 = auto: 49152 on CPU, none on CUDA)",
    )
    p.add_argument(
        "--negative-sampling",
        choices=SAMPLING_MODES,
        help="training negatives: exact "
        "(never a known positive; default) or approximate (DLE's uniform draw)",
    )
    p.add_argument("--seed", type=int, help=f"seed of every random draw (default: {d.seed})")
    p.add_argument("--l2", type=float, help=f"MF: per-example L2 coefficient (default: {d.l2})")
    p.add_argument(
        "--init-std",
        type=float,
        help=f"MF: embedding init standard deviation (default: {d.init_std})",
    )
