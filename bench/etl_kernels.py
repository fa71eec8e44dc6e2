"""The ETL's per-partition steps timed on numpy and on cupy (the GPU check's ETL step).

``ncf.workflows.partition.prepare`` (latest of duplicates, minimum-ratings filters, leave-one-out)
and ``finish`` (ids, exact negatives seeded per user) on one partition of ``ncf synth`` data held
in memory, on each array module present: what the partitioned ETL's tasks run on pandas workers
and, on cupy arrays, on dask-cuda workers. The GPU test host has cupy but not cuDF, Dask or Merlin,
so this is how its ETL kernels are measured. Both devices must write the same rows (each user's
negatives come from its own stream), and the bench says whether they did.

    python -m ncf.bench.etl_kernels --scale 1.0 --devices numpy cupy
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.workflows.encoding import sorted_unique_encoding
from ncf.workflows.etl import EtlConfig
from ncf.workflows.partition import Summary, finish, negative_seeds, prepare


@dataclass
class EtlKernelsBench(Config):
    """The per-partition ETL steps on numpy and cupy arrays."""

    scale: float = setting(1.0, help="`ncf synth` scale of the partition (1.0 = 20M ratings)")
    devices: list[str] = setting(
        default_factory=lambda: ["numpy", "cupy"], help="array modules (cupy: skipped if absent)"
    )
    eval_negatives: int = setting(EtlConfig.eval_negatives, help="negatives per user")
    repeats: int = setting(2, help="timed runs per device (the first warms up; best is kept)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    name: str = setting("etl-kernels", help="results name")

    def check(self) -> None:
        unknown = set(self.devices) - {"numpy", "cupy"}
        if unknown or self.scale <= 0 or self.repeats < 1:
            raise ValueError(
                f"--devices {self.devices} (numpy, cupy), --scale {self.scale} (> 0), --repeats "
                f"{self.repeats} (>= 1)"
            )


CONFIG = EtlKernelsBench


def run(args: EtlKernelsBench) -> Results:
    from ncf.sources.synth import SynthConfig, generate

    table = generate(SynthConfig(scale=args.scale, seed=DEFAULT_SEED))
    cols = {
        "user": table[names.RAW_USER],
        "item": table[names.RAW_ITEM],
        "time": table[names.RAW_TIME],
        "row": np.arange(table[names.RAW_USER].size, dtype=np.int64),
    }
    rows, outputs = [], {}
    for device in args.devices:
        if device == "cupy" and find_spec("cupy") is None:
            continue
        best, out = None, None
        for _ in range(args.repeats):
            record, out = _time(cols, device, args.eval_negatives)
            best = record if best is None or record["total_s"] < best["total_s"] else best
        outputs[device] = out
        rows.append({"device": device, "ratings": int(cols["user"].size), **best})
    same = None
    if len(outputs) == 2:
        a, b = outputs.values()
        same = all(np.array_equal(a[k][i], b[k][i]) for k in a for i in (0, 1))
    columns = ["device", "ratings", "prepare_s", "finish_s", "total_s", "ratings_per_s"]
    title = "ETL per-partition steps (prepare + finish) on numpy and cupy"
    extra = {"scale": args.scale, "identical_outputs": same}
    return Results(args.name, rows, columns, title, args.results_dir, extra)


def _time(cols: dict[str, np.ndarray], device: str, negatives: int) -> tuple[dict, Any]:
    """One prepare + finish on ``device``; seconds and the output rows (host arrays)."""
    xp, sync = np, lambda: None
    if device == "cupy":
        import cupy

        xp, sync = cupy, cupy.cuda.Device().synchronize
    data = {k: xp.asarray(v) for k, v in cols.items()}
    sync()
    t0 = time.perf_counter()
    part = prepare(data, EtlConfig.min_ratings, "test")
    sync()
    t1 = time.perf_counter()
    summary = Summary.of(part)
    encoding = sorted_unique_encoding(xp.asarray(summary.users), xp.asarray(summary.items))
    out = finish(part, encoding, negatives, negative_seeds(DEFAULT_SEED, 1))
    sync()
    t2 = time.perf_counter()
    n = int(cols["user"].size)
    record = {
        "prepare_s": round(t1 - t0, 3),
        "finish_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "ratings_per_s": round(n / (t2 - t0)),
    }
    return record, out


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
