"""Run under torchrun by a test: the same training with replicated and with sharded tables.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        -m tests.models.sharding_run ETL_DIR OUT_DIR ARGS_JSON

Every rank builds the real ``Trainer`` with ``ARGS_JSON``'s TrainConfig fields three times, in one
process group: ``replicated`` (DDP over every parameter) and ``sharded`` (``--shard-embeddings``)
run ``fit`` for every epoch (checkpoints, metrics.json); ``resumed`` (sharded) runs the first
half of the epochs, then a new ``Trainer`` resumes it from its ``last.pt`` and finishes. Each
writes ``OUT_DIR/<run>/rank<r>.json``: its history, the bytes DDP all-reduced and the tables'
all-to-alls sent, the optimizer steps, and the rows of each table this rank holds.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from ncf.models import checkpoint
from ncf.models.data import load_etl
from ncf.models.distributed import DistEnv, process_group
from ncf.models.presets import TrainConfig
from ncf.models.trainer import RunOptions, Trainer


def trainer(etl_dir: Path, out: Path, fields: dict, shard: bool, env: DistEnv) -> Trainer:
    cfg = TrainConfig.from_dict(fields)
    cfg.check()
    opts = RunOptions(out=out, etl_dir=etl_dir, shard_embeddings=shard)
    return Trainer(load_etl(etl_dir, env.device), cfg, env, opts)


def record(tr: Trainer, epochs: int) -> dict:
    samples = tr.data.train_users.numel() * (1 + tr.cfg.negatives)
    return {
        "history": [{"loss": h["loss"], "hr@10": h["hr@10"]} for h in tr.history],
        "payload_bytes": tr.comm.payload_bytes,
        "exchange_bytes": tr.model.exchange.bytes if tr.sharded else 0,
        "steps": epochs * math.ceil(samples / tr.cfg.batch_size),
        "rows": {n: list(p.shape) for n, p in tr.model.named_parameters() if "embed" in n},
        "replicated_params": sum(
            p.numel() for n, p in tr.model.named_parameters() if n not in tr.sharded
        ),
    }


def main(etl_dir: Path, out_dir: Path, fields: dict) -> None:
    torch.set_num_threads(1)
    with process_group("cpu") as env:
        for run, shard in (("replicated", False), ("sharded", True)):
            tr = trainer(etl_dir, out_dir / run, fields, shard, env)
            tr.fit()
            rec = record(tr, fields["epochs"])
            (out_dir / run / f"rank{env.rank}.json").write_text(json.dumps(rec))
        half = fields["epochs"] // 2
        out = out_dir / "resumed"
        trainer(etl_dir, out, {**fields, "epochs": half}, True, env).fit()
        tr = trainer(etl_dir, out, fields, True, env)
        tr.resume_from(out / checkpoint.LAST)
        tr.fit()
        rec = {**record(tr, fields["epochs"] - half), "start_epoch": half}
        (out / f"rank{env.rank}.json").write_text(json.dumps(rec))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]))
