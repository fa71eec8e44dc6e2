"""Run under torchrun by a test: the same training once per gradient compression, one process group.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        -m tests.models.compression_run ETL_DIR OUT_DIR ARGS_JSON none fp16

First every rank asks whether this torch's gloo can all-reduce bf16 (``check_compression``) and
writes ``OUT_DIR/bf16<r>.json``: accepted, or the one-line refusal. Then every rank builds the real ``Trainer`` with ``ARGS_JSON``'s TrainConfig fields plus
``grad_compression``, trains and evaluates each epoch (``train_epoch``, ``evaluate``: what
``Trainer.fit`` runs, without its checkpoints and plots) and writes ``OUT_DIR/<compression>/
rank<r>.json``: each epoch's loss and HR@10, the bytes its DDP hook all-reduced, the buckets and the
optimizer steps, the model's parameter count and the ItemPop HR@10. One process group for every
run: torchrun's start-up is paid once.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from ncf.models.comm import check_compression
from ncf.models.data import load_etl
from ncf.models.distributed import DistEnv, process_group
from ncf.models.evaluate import evaluate_itempop
from ncf.models.presets import TrainConfig
from ncf.models.trainer import RunOptions, Trainer


def train_once(etl_dir: Path, out: Path, fields: dict, compression: str, env: DistEnv) -> dict:
    """Train one run; this rank's communication record."""
    cfg = TrainConfig.from_dict({**fields, "grad_compression": compression})
    cfg.check()
    data = load_etl(etl_dir, env.device)
    trainer = Trainer(data, cfg, env, RunOptions(out=out, etl_dir=etl_dir))
    history = []
    for epoch in range(cfg.epochs):
        loss = trainer.train_epoch(epoch)["loss"]
        history.append({"loss": loss, "hr@10": trainer.evaluate("test")["hr"]})
    samples = data.train_users.numel() * (1 + cfg.negatives)
    return {
        "history": history,
        "payload_bytes": trainer.comm.payload_bytes,
        "buckets": trainer.comm.buckets,
        "steps": cfg.epochs * math.ceil(samples / cfg.batch_size),
        "params": sum(p.numel() for p in trainer.model.parameters()),
        "itempop_hr@10": evaluate_itempop(data, cfg.topk)["hr"],
    }


def probe_bf16(env: DistEnv) -> dict:
    """Whether ``--grad-compression bf16`` is accepted here, or its refusal."""
    try:
        check_compression("bf16", env)
    except ValueError as exc:
        return {"accepted": False, "refused": str(exc)}
    return {"accepted": True}


def main(etl_dir: Path, out_dir: Path, fields: dict, compressions: list[str]) -> None:
    torch.set_num_threads(1)
    with process_group("cpu") as env:
        (out_dir / f"bf16{env.rank}.json").write_text(json.dumps(probe_bf16(env)))
        for compression in compressions:
            out = out_dir / compression
            out.mkdir(parents=True, exist_ok=True)
            record = train_once(etl_dir, out, fields, compression, env)
            (out / f"rank{env.rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:])
