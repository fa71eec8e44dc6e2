"""The training loop: ``Trainer(data, cfg, env, opts).fit()``, read top to bottom.

``fit`` logs the run's parameters and the ItemPop baseline, then runs the epochs: each trains
(``train_epoch``: one ``step`` per global batch), is evaluated (``evaluate``), may become the kept
epoch (``ncf.models.selection``: the protocol of the data), is checkpointed (best.pt, then last.pt,
written in the background while the next epoch trains), logged, and may stop the run. With a
validation split, the kept epoch is then scored once on the test split. Last, metrics.json and
learning_curve.png. ``resume_from`` continues a run from its last.pt.

One optimizer step per global batch. Each rank's slice of the batch is processed in micro-batches
whose summed losses are scaled by ``world_size * group / global_batch`` (``group``: the samples
of one loss term, 1 for BCE, models/loss.py); DDP averages over ranks, so the gradient is the
mean over the global batch's loss terms however the batch is split (same math as one process
with one big batch; only float summation order differs).

Rank 0 alone writes (checkpoints, DLLogger lines, metrics.json, learning_curve.png); every rank
trains and evaluates, and takes the same stop decision from the all-reduced metrics.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ncf.core import faults
from ncf.core.atomic import write_json
from ncf.core.dllog import DLLogger
from ncf.models import checkpoint, comm, sharding
from ncf.models.averaging import WeightAverage
from ncf.models.data import EtlData
from ncf.models.distributed import DistEnv, all_reduce_sum, barrier
from ncf.models.dropout import bits_supported, draw_keep_bits
from ncf.models.embedding_grad import StepGradients
from ncf.models.epoch import EpochPlan, epoch_generator, gather, plan_epoch, shard_bounds
from ncf.models.evaluate import evaluate_itempop, evaluate_model
from ncf.models.kinds import TrainedModel, build_model
from ncf.models.loss import group_size, summed_loss
from ncf.models.plots import learning_curve
from ncf.models.presets import CPU_MICRO_BATCH, DEFAULT_PRESET, TrainConfig
from ncf.models.runtime import keep_freed_memory
from ncf.models.sampling import PositiveSet, check_sampleable
from ncf.models.selection import (
    DLE_PROTOCOL,
    VALID_PROTOCOL,
    best_index,
    metric_keys,
    protocol,
    selection_key,
    should_stop,
    summarize,
)

METRICS_FILE = "metrics.json"
PLOT_FILE = "learning_curve.png"
LOG_FILE = "log.json"
# Settings a resumed run may change without changing the result of the epochs it continues.
RESUMABLE_CHANGES = frozenset({"epochs", "threshold", "patience", "min_epochs", "eval_batch_size"})


@dataclass
class RunOptions:
    """How to run (not what to learn): output, precision, progress bar; from ``ncf train``'s config."""

    out: Path
    etl_dir: Path
    amp: bool = False
    deterministic: bool = False
    progress: bool = False  # draw the tqdm bar (ncf.models.progress.show_bar decides)
    preset: str = DEFAULT_PRESET
    sampling_backend: str = "auto"
    pretrain: dict | None = None  # the pretraining runs' figures (ncf.models.pretrain.figures)
    init_from: dict | None = None  # where --init-from started (ncf.models.warm_start.start_from)
    shard_embeddings: bool = False  # several processes: tables sharded by rows (models/sharding.py)


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
    kwargs = {"lr": cfg.optimizer_lr(), "betas": (cfg.beta1, cfg.beta2), "eps": cfg.eps}
    params = list(params)  # a generator would be used up by the first attempt
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, foreach=True, **kwargs)


def declare_metrics(log: DLLogger, k: int, valid: bool = False) -> None:
    """DLLogger METADATA lines: the unit and format of each per-epoch metric (as DLE declares them)."""
    hr, ndcg = metric_keys(valid, k)
    for name, unit in (
        ("train_throughput", "samples/s"),
        ("eval_throughput", "samples/s"),
        ("train_epoch_time", "s"),
        ("eval_epoch_time", "s"),
        ("elapsed", "s"),
        (hr, None),
        (ndcg, None),
        ("loss", None),
    ):
        log.metadata(name, {"unit": unit, "format": ":.4f"})


class Trainer:
    """Trains one model on one ETL split; every rank builds one with the same arguments."""

    def __init__(self, data: EtlData, cfg: TrainConfig, env: DistEnv, opts: RunOptions):
        self.data, self.cfg, self.env, self.opts = data, cfg, env, opts
        self.device = env.device
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        model = build_model(cfg.model, cfg.model_config(data.num_users, data.num_items))
        # The tables' weights each rank keeps a block of (--shard-embeddings; [] replicated),
        # cut before the move: only the blocks reach the device.
        self.sharded = sharding.shard_tables(model, env) if self._shards() else []
        self.model: TrainedModel = model.to(self.device)
        # A CPU step sends its embedding gradients into one buffer per table and step
        # (models/embedding_grad.py); CUDA keeps nn.Embedding's backward.
        self.step_grads = StepGradients() if self.device.type == "cpu" else None
        self.model.step_grads = self.step_grads
        if self.sharded:  # their gradients come from the all-to-alls, not DDP's all-reduce
            DDP._set_params_and_buffers_to_ignore_for_model(self.model, self.sharded)
        self.net = DDP(self.model, device_ids=self._ddp_ids()) if env.distributed else self.model
        # The gradient all-reduce's hook and its byte count (None: one process, no all-reduce).
        self.comm = comm.install(self.net, cfg.grad_compression, env) if env.distributed else None
        self.opt = make_optimizer(self.model.parameters(), cfg, self.device)
        self.scaler = make_grad_scaler(opts.amp and self.device.type == "cuda")  # fp16 scaling
        self.amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.positives = None  # the training positives exact negative sampling avoids
        if cfg.negative_sampling == "exact" and cfg.negatives > 0:
            self.positives = PositiveSet(
                data.train_users, data.train_items, data.num_users, data.num_items,
                opts.sampling_backend,
            )  # fmt: skip
            check_sampleable(self.positives, data.train_users, data.item_range)
        # Samples per loss term: the batch, the ranks' shards and the micro-batches are cut at
        # whole groups (models/loss.py).
        self.group = group_size(cfg.loss, cfg.negatives)
        # The model evaluated and saved: the weights, or their moving average (models/averaging.py;
        # not with sharded tables: TrainRunConfig.check refuses that).
        decay = cfg.ema_decay(self.steps_per_epoch())
        self.average = WeightAverage(decay) if decay > 0 else None
        if self.average is not None and self.sharded:
            raise ValueError(f"--ema-epochs {cfg.ema_epochs} with --shard-embeddings: pass one")
        self.start_epoch = 0
        self.history: list[dict] = []  # one record per epoch (ncf.models.selection)
        self.test_result: dict | None = None  # with a valid split: best.pt scored once on test
        if self.device.type == "cpu":
            keep_freed_memory()  # after setup: its temporaries go back to the OS

    def _shards(self) -> bool:
        return self.opts.shard_embeddings and self.env.distributed

    def full_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict with whole tables, on every rank (every rank calls it)."""
        if not self.sharded:
            return self.model.state_dict()
        return sharding.full_state(self.model, self.env, everywhere=True)

    def _ddp_ids(self) -> list[int] | None:
        return [self.device.index] if self.device.type == "cuda" else None

    # -- the run -------------------------------------------------------------------------------
    def fit(self) -> dict:
        """The whole run (module docstring) into ``opts.out``; returns DLE's summary."""
        info = self.run_info()
        k, valid = self.cfg.topk, self.data.has_valid
        with DLLogger(self.opts.out / LOG_FILE, stdout=True, enabled=self.env.is_main) as log:
            declare_metrics(log, k, valid)
            params = {"preset": self.opts.preset, **self.cfg.to_dict(), **info}
            log.log(step="PARAMETER", data={**params, "resumed_at_epoch": self.start_epoch})
            itempop = evaluate_itempop(self.data, k)  # no parameters to select: scored on test
            pops = {f"itempop_hr@{k}": itempop["hr"], f"itempop_ndcg@{k}": itempop["ndcg"]}
            valid_pop = evaluate_itempop(self.data.held_out("valid"), k) if valid else None
            if valid_pop is not None:
                pops[f"itempop_valid_hr@{k}"] = valid_pop["hr"]
                pops[f"itempop_valid_ndcg@{k}"] = valid_pop["ndcg"]
            log.log(step="PARAMETER", data=pops)
            self.run_epochs(log)
            return self.write_outputs(log, itempop, info, valid_pop)

    def run_epochs(self, log: DLLogger) -> None:
        """Train from ``start_epoch`` to the last epoch, the HR threshold or the patience; with a
        valid split, then score ``best.pt`` once on the test split (``test_result``)."""
        if not should_stop(self.history, self.cfg, self.data.has_valid):  # else: finished, resumed
            saver = checkpoint.BackgroundSaver()  # epoch e's files are written while e+1 trains
            try:
                self._epochs(log, saver)
            finally:
                saver.wait()
        if self.data.has_valid:
            self.test_result = self.score_best_on_test()

    def _epochs(self, log: DLLogger, saver: checkpoint.BackgroundSaver) -> None:
        """The epochs loop: train, evaluate, select, checkpoint, log, stop."""
        k, out, valid = self.cfg.topk, self.opts.out, self.data.has_valid
        hr, ndcg = metric_keys(valid, k)
        kept = best_index(self.history, valid, k)
        best = (
            selection_key(self.history[kept], valid, k) if self.history else (-1.0,) * (1 + valid)
        )
        # elapsed: wall time of the epochs so far, resumes included
        clock = time.perf_counter() - (self.history[-1]["elapsed"] if self.history else 0.0)
        for epoch in range(self.start_epoch, self.cfg.epochs):
            bar = self._progress_bar(epoch)
            stats = self.train_epoch(epoch, bar)
            if bar is not None:
                bar.close()
            rec = self._record(epoch, stats, self.evaluate("valid" if valid else "test"))
            metrics = {hr: rec[hr], ndcg: rec[ndcg]}
            jobs = []
            if selection_key(rec, valid, k) > best:
                best = selection_key(rec, valid, k)
                jobs = [(out / checkpoint.BEST, self.state(epoch, metrics, full=False))]
            rec["elapsed"] = time.perf_counter() - clock
            self.history.append(rec)
            last = self.state(epoch, metrics, full=True)  # every rank: sharded tables gather
            if self.env.is_main:
                # best.pt before last.pt: a kill in between resumes from the previous epoch and redoes it.
                saver.submit([*jobs, (out / checkpoint.LAST, last)])
                log.log(step=(epoch,), data={kk: v for kk, v in rec.items() if kk != "epoch"})
                log.flush()
            if should_stop(self.history, self.cfg, valid):
                break

    def _record(self, epoch: int, stats: dict, ev: dict) -> dict:
        """An epoch's record (``elapsed`` is added once it is checkpointed)."""
        hr, ndcg = metric_keys(self.data.has_valid, self.cfg.topk)
        return {
            "epoch": epoch,
            "loss": stats["loss"],
            hr: ev["hr"],
            ndcg: ev["ndcg"],
            "train_throughput": stats["train_throughput"],
            "train_epoch_time": stats["train_epoch_time"],
            "eval_epoch_time": ev["seconds"],
            "eval_throughput": ev["samples"] / max(ev["seconds"], 1e-9),
        }

    def _progress_bar(self, epoch: int):
        if not self.opts.progress:  # decided once by ncf.models.progress.show_bar
            return None
        from tqdm import tqdm

        return tqdm(
            total=self.steps_per_epoch(),
            desc=f"epoch {epoch}",
            unit="batch",
            leave=False,
            file=sys.stderr,
        )

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
            self.data, self.cfg.negatives, self.cfg.negative_sampling, self.positives, gen,
            grouped=self.group > 1,
        )  # fmt: skip
        n, g, batch = plan.num_samples, self.group, self.global_batch()
        steps = self.steps_per_epoch()
        loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, start in enumerate(range(0, n, batch)):
            for group in self.opt.param_groups:  # the train config's rule (TrainConfig.lr_at)
                group["lr"] = self.cfg.lr_at(epoch * steps + i, steps)
            loss += self.step(plan, start, min(batch, n - start), gen)
            if progress is not None:
                progress.update(1)
        all_reduce_sum(loss, self.env)
        loss_value = loss.item() / max(n // g, 1)  # per loss term; .item() waits for the device
        self._sync()
        seconds = time.perf_counter() - t0
        return {
            "loss": loss_value,
            "train_epoch_time": seconds,
            "train_throughput": n / max(seconds, 1e-9),
            "samples": n,
        }

    def steps_per_epoch(self) -> int:
        """Optimizer steps of one epoch (every epoch has the same number of samples)."""
        samples = self.data.train_users.numel() * (1 + self.cfg.negatives)
        return -(-samples // self.global_batch())

    def global_batch(self) -> int:
        """Samples per optimizer step: ``--batch-size``, rounded down to whole loss groups."""
        return max(self.group, self.cfg.batch_size // self.group * self.group)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- one optimizer step --------------------------------------------------------------------
    def micro_batches(self, global_batch: int) -> int:
        """Micro-batches per rank for a global batch (the same count on every rank, for DDP)."""
        local_max = math.ceil(global_batch / self.env.world_size)
        cap = self.cfg.micro_batch or (CPU_MICRO_BATCH if self.device.type == "cpu" else local_max)
        return max(1, self.cfg.grad_accumulation, math.ceil(local_max / cap))

    def step(self, plan: EpochPlan, start: int, size: int, gen: torch.Generator) -> torch.Tensor:
        """Train on global batch ``plan.perm[start : start + size]``; returns this rank's loss sum.

        ``size`` is a multiple of ``self.group``: ranks and micro-batches get whole groups.
        """
        bits = (
            None  # keep bits [size, ceil(width / 8)] per dropout layer, of the whole global batch
        )
        if self.cfg.dropout > 0 and bits_supported(self.cfg.dropout):
            bits = [draw_keep_bits(size, w, gen, self.device) for w in self.model.dropout_widths()]
        # A step starts from no gradient, even after a step that raised between its micro-batches.
        self.opt.zero_grad(set_to_none=True)
        if self.model.step_grads is not None:
            self.model.step_grads.reset()
        g = self.group
        lo, hi = (g * b for b in shard_bounds(size // g, self.env.world_size, self.env.rank))
        users, items, labels = gather(plan, self.data, plan.perm[start + lo : start + hi])
        n_micro = self.micro_batches(size)
        factor = self.env.world_size * g / size  # the mean over the global batch's loss terms
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for m in range(n_micro):
            ms, me = (g * b for b in shard_bounds((hi - lo) // g, n_micro, m))
            if bits is not None:
                self.model.set_dropout_bits([b[lo + ms : lo + me] for b in bits])
            sync = not self.env.distributed or m == n_micro - 1
            if self.model.step_grads is not None:  # the last backward hands over the gradients
                self.model.step_grads.last = m == n_micro - 1
            with contextlib.nullcontext() if sync else self.net.no_sync():
                with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.opts.amp):
                    logits = self.net(users[ms:me], items[ms:me])
                term = summed_loss(logits, labels[ms:me], g)
                self.scaler.scale((term + self.model.penalty()) * factor).backward()
            total += term.detach()
        self.model.set_dropout_bits(None)
        if self.sharded and self.scaler.is_enabled():  # one overflow skips the step everywhere
            sharding.agree_on_overflow(self.model, self.env)
        faults.hit(faults.OPTIMIZER_STEP)  # crash tests: NCF_FAULT=optimizer_step:N
        # get_scale() waits for the device: only read with an average to update
        watch = self.average is not None and self.scaler.is_enabled()
        scale = self.scaler.get_scale() if watch else 1.0
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        stepped = not watch or self.scaler.get_scale() >= scale
        if self.average is not None and stepped:  # an overflow skipped the step: nothing to fold
            self.average.update(self.model)
        return total

    # -- evaluation ----------------------------------------------------------------------------
    def evaluate(self, split: str = "test") -> dict[str, float]:
        """HR/NDCG@topk on the ``split`` held-out split, "test" or "valid" (all ranks take part).

        For "valid" the evaluated data holds no test tensors (``EtlData.held_out``).
        """
        with self.average.applied(self.model) if self.average else contextlib.nullcontext():
            return evaluate_model(
                self.model,
                self.data.held_out(split),
                self.env,
                self.cfg.topk,
                self.cfg.eval_batch_size,
                self.opts.amp,
            )

    def score_best_on_test(self) -> dict:
        """Load ``best.pt`` (written by rank 0) into the model and score it once on the test split."""
        barrier(self.env)  # every rank waits for rank 0's saver to have written best.pt
        state = checkpoint.load(self.opts.out / checkpoint.BEST, map_location=self.device)
        self.model.load_state_dict(state["model"])
        if self.average is not None:  # best.pt's model is an average: evaluate it as it is
            self.average.load(self.model, state["model"])
        ev = self.evaluate("test")
        k = self.cfg.topk
        return {"epoch": int(state["epoch"]), f"hr@{k}": ev["hr"], f"ndcg@{k}": ev["ndcg"]}

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, epoch: int, metrics: dict[str, float], full: bool) -> dict:
        """Checkpoint dict (docs/ARCHITECTURE.md); ``full`` adds what ``--resume`` needs."""
        trained = (
            sharding.full_state(self.model, self.env)  # whole tables, on rank 0
            if self.sharded
            else {k: v.detach() for k, v in self.model.state_dict().items()}  # saver copies
        )
        # "model" is the model evaluated: the average of the weights when there is one
        model = self.average.state_dict(self.model) if self.average else trained
        state = {
            "model": model,
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
            opt = (
                sharding.full_optimizer_state(self.opt, self.model, self.env)  # moments whole
                if self.sharded
                else self.opt.state_dict()
            )
            if self.average is not None:
                state["trained_model"] = trained  # what --resume trains on from
            state.update(
                optimizer=opt,
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
        self._check_resumable(path, state)
        self.model.load_state_dict(state.get("trained_model", state["model"]))
        if self.average is not None:
            self.average.load(self.model, state["model"])
        opt = state["optimizer"]
        self.opt.load_state_dict(
            sharding.sharded_optimizer_state(opt, self.model) if self.sharded else opt
        )
        self.scaler.load_state_dict(state["scaler"])
        checkpoint.set_rng_state(state["rng"], self.device)
        self.history = list(state.get("history", []))
        self.start_epoch = int(state["epoch"]) + 1

    def _check_resumable(self, path: Path, state: dict) -> None:
        """Raise unless ``state`` was trained with these settings (but RESUMABLE_CHANGES) and data."""
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

    # -- outputs -------------------------------------------------------------------------------
    def run_info(self) -> dict:
        """Facts about the run logged as PARAMETERs and saved in metrics.json."""
        data, env = self.data, self.env
        return {
            "device": str(env.device),
            "world_size": env.world_size,
            "local_world_size": env.local_world_size,  # processes on this (rank 0's) node
            "threads": torch.get_num_threads(),  # CPU threads per process
            "amp": self.opts.amp,
            "deterministic": self.opts.deterministic,
            "data": str(self.opts.etl_dir),
            "train_rows": int(data.train_users.numel()),
            "test_users": int(data.test_users.numel()),
            **({"valid_users": int(data.valid_users.numel())} if data.has_valid else {}),
            "protocol": protocol(data.has_valid),
            "eval_negatives": int(data.eval_negatives.shape[1]),
            "sampling_backend": getattr(self.positives, "backend", None),
            **({"pretrain": self.opts.pretrain} if self.opts.pretrain else {}),
            **({"init_from": self.opts.init_from} if self.opts.init_from else {}),
        }

    def write_outputs(
        self, log: DLLogger, itempop: dict, extra: dict, valid_itempop: dict | None = None
    ) -> dict:
        """Final DLLogger summary, metrics.json and the learning curve (rank 0 only); the summary.

        ``itempop`` is the ItemPop baseline on the test split, ``valid_itempop`` on the valid split.
        """
        k = self.cfg.topk
        summary = summarize(self.history, self.cfg.threshold, k)
        if not self.env.is_main:
            return summary
        accuracy = self._accuracy(summary, itempop, valid_itempop)
        tested = {}
        if self.test_result is not None:
            tested = {f"test_hr@{k}": accuracy[f"hr@{k}"], f"test_ndcg@{k}": accuracy[f"ndcg@{k}"]}
        log.log(step=(), data={**summary, **tested})
        metrics = {
            **summary,
            **accuracy,
            "train_samples_per_s": summary.get("mean_train_throughput"),
            "checkpoint": checkpoint.BEST,
            "preset": self.opts.preset,
            "config": self.cfg.to_dict(),
            **extra,
            "history": self.history,
        }
        write_json(self.opts.out / METRICS_FILE, metrics)
        if self.history:
            self._plot(itempop if valid_itempop is None else valid_itempop)
        return summary

    def _accuracy(self, summary: dict, itempop: dict, valid_itempop: dict | None) -> dict:
        """The accuracy keys of metrics.json: DLE's (best test epoch) or the valid/test blocks."""
        k, last = self.cfg.topk, self.history[-1] if self.history else {}
        pop = {f"itempop_hr@{k}": itempop["hr"], f"itempop_ndcg@{k}": itempop["ndcg"]}
        if not self.data.has_valid:
            return {
                "protocol": DLE_PROTOCOL,
                f"hr@{k}": summary.get("best_accuracy"),
                f"ndcg@{k}": summary.get(f"best_ndcg@{k}"),
                f"final_hr@{k}": last.get(f"hr@{k}"),
                f"final_ndcg@{k}": last.get(f"ndcg@{k}"),
                **pop,
            }
        test, vpop = self.test_result or {}, valid_itempop or {}
        return {
            "protocol": VALID_PROTOCOL,
            "valid": {
                f"hr@{k}": summary.get(f"best_valid_hr@{k}"),
                f"ndcg@{k}": summary.get(f"best_valid_ndcg@{k}"),
                f"itempop_hr@{k}": vpop.get("hr"),
                f"itempop_ndcg@{k}": vpop.get("ndcg"),
            },
            "test": {f"hr@{k}": test.get(f"hr@{k}"), f"ndcg@{k}": test.get(f"ndcg@{k}"), **pop},
            # The headline figures are the test split's, of the epoch chosen on validation.
            f"hr@{k}": test.get(f"hr@{k}"),
            f"ndcg@{k}": test.get(f"ndcg@{k}"),
            f"final_valid_hr@{k}": last.get(f"valid_hr@{k}"),
            f"final_valid_ndcg@{k}": last.get(f"valid_ndcg@{k}"),
            **pop,
        }

    def _plot(self, itempop: dict) -> None:
        """learning_curve.png: the per-epoch metrics (validation ones with a valid split)."""
        k, valid = self.cfg.topk, self.data.has_valid
        hr, ndcg = metric_keys(valid, k)
        history = [{**h, f"hr@{k}": h[hr], f"ndcg@{k}": h[ndcg]} for h in self.history]
        split = "validation" if valid else "test"
        where = f"{self.opts.etl_dir.name} (preset {self.opts.preset}), {split} split"
        learning_curve(
            history, self.opts.out / PLOT_FILE, k, itempop, title=f"{self.cfg.model} on {where}"
        )
