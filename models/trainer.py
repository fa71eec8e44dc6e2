"""The NeuMF training loop: DDP, AMP, gradient accumulation, per-epoch evaluation, checkpoints.

One optimizer step per global batch. Each rank's slice of the batch is processed in micro-batches
whose summed losses are scaled by ``world_size / global_batch``; DDP averages over ranks, so the
gradient is the mean over the global batch however the batch is split (same math as one process
with one big batch; only float summation order differs).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ncf.core import faults
from ncf.models import checkpoint
from ncf.models.data import EtlData
from ncf.models.distributed import DistEnv, all_reduce_sum
from ncf.models.dropout import bits_supported, draw_keep_bits
from ncf.models.epoch import EpochPlan, epoch_generator, gather, plan_epoch, shard_bounds
from ncf.models.evaluate import evaluate_model
from ncf.models.kinds import build_model
from ncf.models.presets import TrainConfig
from ncf.models.runtime import keep_freed_memory
from ncf.models.sampling import PositiveSet, check_sampleable

# Default per-rank micro-batch cap on a CPU. bench/train.py at batch 1Mi, fp32, ML-20m size (2 cores):
# 32Ki 155k samples/s 3.1 GB peak RSS; 48Ki 176k, 3.5 GB; 64Ki ~200k, 3.6-3.95 GB.
CPU_MICRO_BATCH = 48 << 10
# Settings a resumed run may change without changing the result of the epochs it continues.
RESUMABLE_CHANGES = frozenset({"epochs", "threshold", "patience", "eval_batch_size"})


@dataclass
class RunOptions:
    """How to run (not what to learn): output, device precision, resume, progress bar."""

    out: Path
    etl_dir: Path
    amp: bool = False
    deterministic: bool = False
    progress: bool = False  # draw the tqdm bar (ncf.models.progress.show_bar decides)
    preset: str = "dle"
    sampling_backend: str = "auto"
    extra: dict = field(default_factory=dict)


def make_grad_scaler(enabled: bool) -> torch.cuda.amp.GradScaler:
    """Dynamic loss scaler for fp16 autocast on CUDA (a no-op pass-through when not ``enabled``).

    ``torch.cuda.amp.GradScaler`` is the scaler torch 2.1 (the NGC images) has; later torch keeps
    it, as ``torch.amp.GradScaler("cuda")`` plus a FutureWarning, which is silenced here.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.cuda.amp.GradScaler(enabled=enabled)


def make_optimizer(params, cfg: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """DLE's Adam; the fused kernel where this torch has one for the device (same update rule)."""
    kwargs = {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "eps": cfg.eps}
    params = list(params)  # a generator would be used up by the first attempt
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, foreach=True, **kwargs)


class Trainer:
    """Trains one NeuMF on one ETL split; every rank builds one with the same arguments."""

    def __init__(self, data: EtlData, cfg: TrainConfig, env: DistEnv, opts: RunOptions):
        self.data, self.cfg, self.env, self.opts = data, cfg, env, opts
        self.device = env.device
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        self.model = build_model(cfg.model, cfg.model_config(data.num_users, data.num_items))
        self.model = self.model.to(self.device)
        self.net = self.model
        if env.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DDP(self.model, device_ids=ids)
        self.opt = make_optimizer(self.model.parameters(), cfg, self.device)
        cuda_amp = opts.amp and self.device.type == "cuda"
        self.scaler = make_grad_scaler(cuda_amp)  # fp16 needs loss scaling
        self.amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.positives = None
        if cfg.negative_sampling == "exact" and cfg.negatives > 0:
            self.positives = PositiveSet(
                data.train_users,
                data.train_items,
                data.num_users,
                data.num_items,
                opts.sampling_backend,
            )
            check_sampleable(self.positives, data.train_users, data.item_range)
        self.start_epoch = 0
        self.history: list[dict] = []
        self.test_result: dict | None = None  # with a valid split: best.pt scored once on test
        if self.device.type == "cpu":
            keep_freed_memory()  # after setup: its temporaries go back to the OS

    # -- one optimizer step ------------------------------------------------------------------
    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches per rank for a global batch (the same count on every rank, for DDP)."""
        local_max = math.ceil(global_batch / self.env.world_size)
        cap = self.cfg.micro_batch or (CPU_MICRO_BATCH if self.device.type == "cpu" else local_max)
        return max(1, self.cfg.grad_accumulation, math.ceil(local_max / cap))

    def step(self, plan: EpochPlan, start: int, size: int, gen: torch.Generator) -> torch.Tensor:
        """Train on global batch ``plan.perm[start : start + size]``; returns this rank's BCE sum."""
        widths = getattr(self.model.cfg, "mlp_layers", [])[1:]  # dropout per MLP layer; MF: none
        bits = None
        if self.cfg.dropout > 0 and bits_supported(self.cfg.dropout):
            bits = [draw_keep_bits(size, w, gen, self.device) for w in widths]  # whole global batch
        lo, hi = shard_bounds(size, self.env.world_size, self.env.rank)
        users, items, labels = gather(plan, self.data, plan.perm[start + lo : start + hi])
        n_micro = self.micro_batches(size)
        factor = self.env.world_size / size
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for m in range(n_micro):
            ms, me = shard_bounds(hi - lo, n_micro, m)
            if bits is not None:
                self.model.dropout_bits = [b[lo + ms : lo + me] for b in bits]
            sync = not self.env.distributed or m == n_micro - 1
            with contextlib.nullcontext() if sync else self.net.no_sync():
                with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.opts.amp):
                    logits = self.net(users[ms:me], items[ms:me])
                bce = F.binary_cross_entropy_with_logits(
                    logits.float(), labels[ms:me], reduction="sum"
                )
                penalty = getattr(self.model, "penalty", 0.0)  # MF's L2 term (models/mf.py)
                self.scaler.scale((bce + penalty) * factor).backward()
            total += bce.detach()
        self.model.dropout_bits = None
        faults.hit(faults.OPTIMIZER_STEP)  # crash tests: NCF_FAULT=optimizer_step:N
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        return total

    # -- one epoch -----------------------------------------------------------------------------
    def train_epoch(self, epoch: int, progress=None) -> dict[str, float]:
        """Draw the epoch's negatives and order, train on every global batch; loss and timing."""
        self._sync()
        t0 = time.perf_counter()
        gen = epoch_generator(self.cfg.seed, epoch, self.device)
        # The global RNG only serves dropout for rates other than 0.5: reseed it per epoch and rank.
        torch.manual_seed(self.cfg.seed * 1_000_003 + epoch * 1009 + self.env.rank)
        self.model.train()
        plan = plan_epoch(
            self.data, self.cfg.negatives, self.cfg.negative_sampling, self.positives, gen
        )
        n, batch = plan.num_samples, self.cfg.batch_size
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for start in range(0, n, batch):
            loss += self.step(plan, start, min(batch, n - start), gen)
            if progress is not None:
                progress.update(1)
        all_reduce_sum(loss, self.env)
        loss_value = loss.item() / max(n, 1)  # .item() waits for the device
        self._sync()
        seconds = time.perf_counter() - t0
        return {
            "loss": loss_value,
            "train_epoch_time": seconds,
            "train_throughput": n / max(seconds, 1e-9),
            "samples": n,
        }

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def evaluate(self, split: str = "test") -> dict[str, float]:
        """HR/NDCG@topk on the ``split`` held-out split, "test" or "valid" (all ranks take part).

        For "valid" the evaluated data holds no test tensors (``EtlData.held_out``).
        """
        return evaluate_model(
            self.model,
            self.data.held_out(split),
            self.env,
            self.cfg.topk,
            self.cfg.eval_batch_size,
            self.opts.amp,
        )

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, epoch: int, metrics: dict[str, float], full: bool) -> dict:
        """Checkpoint dict (docs/ARCHITECTURE.md); ``full`` adds what ``--resume`` needs."""
        state = {
            "model": {
                k: v.detach() for k, v in self.model.state_dict().items()
            },  # copied by the saver
            "config": self.model.cfg.to_dict(),
            "epoch": epoch,
            "metrics": metrics,
            "data": {
                "etl_dir": str(self.opts.etl_dir),
                "metadata_sha256": self.data.metadata_sha256,
            },
            "train_config": self.cfg.to_dict(),
            "amp": self.opts.amp,
            "preset": self.opts.preset,
        }
        if full:
            state.update(
                optimizer=self.opt.state_dict(),
                scaler=self.scaler.state_dict(),
                rng=checkpoint.rng_state(self.device),
                history=self.history,
            )
        return state

    def resume_from(self, path: Path) -> None:
        """Continue from a ``last.pt``: model, optimizer, scaler, RNG, history; next epoch."""
        state = checkpoint.load(path, map_location=self.device)
        if "optimizer" not in state:
            raise ValueError(
                f"{path}: no optimizer state; --resume needs RUN/{checkpoint.LAST}, not best.pt"
            )
        saved = state.get("train_config", {})
        defaults = TrainConfig().to_dict()  # a field newer than the checkpoint had its default
        diff = sorted(
            k
            for k, v in self.cfg.to_dict().items()
            if saved.get(k, defaults[k]) != v and k not in RESUMABLE_CHANGES
        )
        if diff or bool(state.get("amp")) != self.opts.amp:
            changes = {k: (saved.get(k, defaults[k]), getattr(self.cfg, k)) for k in diff}
            raise ValueError(
                f"{path}: --resume with different settings {changes} (amp saved={state.get('amp')}); "
                "use the original flags or start a new --out directory"
            )
        if state.get("data", {}).get("metadata_sha256") != self.data.metadata_sha256:
            raise ValueError(
                f"{path}: was trained on another ETL output ({state['data'].get('etl_dir')}); "
                "resume with the same --data"
            )
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        checkpoint.set_rng_state(state["rng"], self.device)
        self.history = list(state.get("history", []))
        self.start_epoch = int(state["epoch"]) + 1
