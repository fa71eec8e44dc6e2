"""Write a perf_analyzer ``--input-data`` JSON of real ids for one model of an exported repository.

perf_analyzer's own random INT64 inputs index outside the embeddings; docker-compose's ``bench``
service (Triton SDK image) reads the file this writes after ``ncf export``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncf.bench import entry
from ncf.core import names
from ncf.core.atomic import write_text
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.serving.client import IdPool


def pa_input_data(pool: IdPool, model: str, k: int, n: int, seed: int) -> dict:
    """perf_analyzer ``--input-data`` JSON: ``n`` batch-1 entries of real ids (its random int64
    inputs would index outside the embeddings)."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        record = {}
        for name, array, _dtype in pool.inputs(model, 1, k, rng):
            # every model batches (recommend too): the shape without the batch axis
            record[name] = {"content": array.ravel().tolist(), "shape": list(array.shape[1:])}
        data.append(record)
    return {"data": data}


@dataclass
class PaInput(Config):
    """Write a perf_analyzer ``--input-data`` JSON of real ids for one model of a repository."""

    repo: Path = setting(Path("triton_repo"), help="exported repository")
    model: str = setting(
        names.MODEL_NEUMF,
        choices=(names.MODEL_NEUMF, names.MODEL_ENSEMBLE, names.MODEL_RECOMMEND),
        help="whose inputs to write (neumf_libtorch/neumf_onnx take neumf's)",
    )
    entries: int = setting(1024, help="batch-1 entries")
    k: int = setting(10, help="k for `recommend`")
    seed: int = setting(DEFAULT_SEED, help="seed of the ids")
    out: Path = setting(Path("triton_repo/perf_input.json"), help="file to write")

    def check(self) -> None:
        if self.entries < 1:
            raise ValueError(f"--entries {self.entries}: must be >= 1")


CONFIG = PaInput


def run(args: PaInput) -> int:
    data = pa_input_data(IdPool(args.repo), args.model, args.k, args.entries, args.seed)
    write_text(args.out, json.dumps(data))
    print(f"wrote {args.out} ({args.entries} entries for {args.model})")
    return 0


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
