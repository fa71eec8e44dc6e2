"""A same-machine baseline: DLE's NeuMF training step as DLE runs it, timed like ours.

DLE (PyTorch/Recommendation/NCF) trains the whole global batch at once with ``nn.Dropout`` after
each MLP ReLU, a mean ``BCEWithLogitsLoss`` and Adam, on DLE's approximate (uniform) negatives.
Here: the same NeuMF weights and initialisation (models/neumf.py), that forward written out with
``F.dropout``, the single-tensor Adam and glibc's default allocator (the worker does not call
``ncf.models.runtime.configure``). Timing it in the same run as our step makes the speed-up robust to
whatever else the machine is doing. On CUDA it also runs in DLE's GPU modes: ``tf32`` (TF32
matmuls, DLE's "TF32" rows) and ``amp`` (fp16 autocast with a dynamic GradScaler, standing in for
DLE's apex AMP), so that a GPU's figures compare against DLE's step on that same GPU.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ncf.models.data import EtlData
from ncf.models.epoch import epoch_generator, gather, plan_epoch
from ncf.models.neumf import NeuMF
from ncf.models.presets import PRESETS, TrainConfig
from ncf.models.trainer import make_grad_scaler


def dle_settings() -> TrainConfig:
    """DLE's hyperparameters (Adam, negatives per positive, NeuMF's shape): the ``dle`` preset."""
    return TrainConfig(**PRESETS["dle"])


def dle_forward(model: NeuMF, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
    """Logits ``[B]``: GMF product and MLP tower with ``dropout(relu(.))``, concatenated."""
    xmf = model.mf_user_embed(user) * model.mf_item_embed(item)
    x = torch.cat((model.mlp_user_embed(user), model.mlp_item_embed(item)), dim=1)
    for layer in model.mlp:
        x = F.dropout(torch.relu(layer(x)), model.cfg.dropout, training=True)
    return model.final(torch.cat((xmf, x), dim=1)).squeeze(1)


def time_dle_steps(
    data: EtlData,
    batch: int,
    warmup: int,
    steps: int,
    device: torch.device,
    mode: str = "fp32",
) -> dict:
    """Samples/s of DLE's step on global batches of epoch 0 (approximate negatives, as many per
    positive as the ``dle`` preset).

    ``mode``: ``fp32``, or on CUDA ``tf32`` or ``amp`` (fp16 autocast, dynamic loss scaling).
    """
    if mode not in ("fp32", "tf32", "amp") or (mode != "fp32" and device.type != "cuda"):
        raise ValueError(f"DLE step mode {mode!r} on {device}: use fp32, or tf32/amp on CUDA")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    amp = mode == "amp"
    scaler = make_grad_scaler(amp)
    # amp is CUDA only; torch 2.1 refuses fp16 for a CPU autocast even when it is disabled.
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    hp = dle_settings()
    torch.manual_seed(hp.seed)
    model = NeuMF(hp.model_config(data.num_users, data.num_items)).to(device).train()
    betas = (hp.beta1, hp.beta2)
    opt = torch.optim.Adam(model.parameters(), lr=hp.lr, betas=betas, eps=hp.eps, foreach=False)
    gen = epoch_generator(hp.seed, 0, device)
    plan = plan_epoch(data, hp.negatives, "approximate", None, gen)
    n = plan.num_samples
    starts = [(i * batch) % max(n - batch, 1) for i in range(warmup + steps)]
    seconds = 0.0
    for k, start in enumerate(starts):
        t0 = time.perf_counter()
        users, items, labels = gather(plan, data, plan.perm[start : start + batch])
        opt.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            logits = dle_forward(model, users.long(), items.long())
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if k >= warmup:
            seconds += time.perf_counter() - t0
    size = min(batch, n)
    return {
        "samples_per_s": round(steps * size / seconds),
        "step_s": round(seconds / steps, 4),
        "micro_batch": size,
    }
