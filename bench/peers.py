"""RecBole 1.2.1's NeuMF and BPR-MF trained on exactly our split, beside our own figures.

    make peers                                   # .venv-peers: Python 3.11, RecBole 1.2.1 (pinned)
    ncf etl --input data/ml-latest-small/ratings.csv --out work/etl-small
    python -m ncf.bench.peers --etl work/etl-small   # or: ncf bench peers --etl ...

The ETL's ``train/``, ``valid/`` and ``test/`` are written as RecBole atomic files
(``DATASET.{train,valid,test}.inter``, read through RecBole's ``benchmark_filename``), so both
tools hold out the very same item of every user. Each model and seed runs in the peers' own
interpreter (bench/peers_recbole.py; the project's venv has no RecBole). Two protocols per run,
both at the epoch chosen on RecBole's validation NDCG@10:

- ``recbole uni100``: RecBole's own evaluation, 100 uniform negatives drawn by RecBole;
- ``ours``: the trained model's scores of the ETL's own candidates (``valid_negatives/``,
  ``negatives/``: the held-out item and its 100 negatives), turned into HR@10/NDCG@10 by
  ``ncf.models.metrics.hit_ndcg``, the code that scores our models: the same candidates, the
  same tie rule.

Results: ``bench/results/peers-<ETL folder name>.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import BenchError, Results
from ncf.core import names, textfile
from ncf.core.config import DEFAULT_SEED, Config, flag, setting
from ncf.models.data import load_etl
from ncf.models.metrics import hit_ndcg

RUNNER = Path(__file__).resolve().parent / "peers_recbole.py"
PEERS_VENV = Path(__file__).resolve().parents[1] / ".venv-peers"  # where `make peers` puts it
MODELS = ("NeuMF", "BPR")
HEADER = f"{names.USER}:token\t{names.ITEM}:token\n"  # RecBole's atomic-file header
COLUMNS = (
    "model",
    "seed",
    "protocol",
    "best_epoch",
    "valid_hr10",
    "valid_ndcg10",
    "test_hr10",
    "test_ndcg10",
    "samples_per_s",
)
PROTOCOL_RECBOLE = "recbole uni100 (RecBole's negatives)"
PROTOCOL_OURS = "ours (the ETL's negatives)"


@dataclass
class PeersBench(Config):
    """RecBole's NeuMF and BPR-MF on our split (pre-split atomic files), both protocols."""

    etl: Path | None = setting(
        None, help="`ncf etl --holdout valid,test` output (train/, valid/, test/) (required)"
    )
    models: list[str] = setting(
        default_factory=lambda: list(MODELS), choices=MODELS, help="RecBole models to train"
    )
    seeds: list[int] = setting(default_factory=lambda: [DEFAULT_SEED], help="one run per seed")
    epochs: int = setting(20, help="training epochs (the best validation epoch is kept)")
    ours: bool = flag(True, help="also score the ETL's own candidates (--no-ours: RecBole's only)")
    venv: Path = setting(PEERS_VENV, help="the peers' venv (made by `make peers`)")
    work: Path = setting(Path("work/peers"), help="atomic files, jobs, checkpoints and logs")
    name: str = setting("", help="results name (default peers-<ETL folder name>)")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs}: must be >= 1")
        if not self.models:
            raise ValueError("--models: name at least one of NeuMF, BPR")


CONFIG = PeersBench


def peers_python(venv: Path) -> Path:
    """The peers' interpreter; BenchError (one line) when ``make peers`` has not made it."""
    python = venv / "bin" / "python"
    if not python.is_file():
        raise BenchError(f"{python}: no peers venv; run `make peers` first")
    return python


def read_split(etl: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``(users, items)`` int64 of each of train/, valid/, test/ (the project's reader, checked)."""
    data = load_etl(etl)
    if not data.has_valid:
        raise ValueError(f"--etl {etl}: no valid/ split; rerun `ncf etl --holdout valid,test`")
    pairs = {
        "train": (data.train_users, data.train_items),
        "valid": (data.valid_users, data.valid_items),
        "test": (data.test_users, data.test_items),
    }
    return {
        k: (u.numpy().astype(np.int64), i.numpy().astype(np.int64)) for k, (u, i) in pairs.items()
    }


def write_atomic(etl: Path, folder: Path, dataset: str) -> dict[str, int]:
    """Write ``folder/dataset/dataset.{train,valid,test}.inter`` (model ids as tokens, in the
    ETL's row order); return each file's row count."""
    out = folder / dataset
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, (users, items) in read_split(etl).items():
        rows = np.stack([users, items], axis=1)
        with open(out / f"{dataset}.{split}.inter", "w") as f:
            f.write(HEADER)
            np.savetxt(f, rows, fmt="%d", delimiter="\t")
        counts[split] = len(rows)
    return counts


def write_candidates(etl: Path, path: Path) -> Path:
    """The ETL's evaluation candidates as tokens: ``{split}_users [U]``, ``{split}_items [U, 1+N]``
    (column 0 the held-out item, then its negatives in the ETL's order)."""
    data = load_etl(etl)
    arrays = {}
    for split, held in (("valid", data.held_out("valid")), ("test", data)):
        items = torch.cat([held.test_items.unsqueeze(1), held.eval_negatives], dim=1)
        arrays[f"{split}_users"] = held.test_users.numpy().astype(np.int64)
        arrays[f"{split}_items"] = items.numpy().astype(np.int64)
    np.savez(path, **arrays)
    return path


def reusable(job_file: Path, job: dict[str, Any]) -> bool:
    """True if an earlier bench ran this very job to the end: its job file equals ``job`` and its
    result and scores exist (a killed bench resumes with the runs it finished)."""
    if not (job_file.is_file() and Path(job["out"]).is_file()):
        return False
    result = textfile.read_json(job["out"])
    done = Path(result.get("scores_file") or job["out"]).is_file()
    return textfile.read_json(job_file) == job and done


def run_job(python: Path, job: dict[str, Any], work: Path) -> dict[str, Any]:
    """Run one job in the peers' interpreter (cwd ``work``: RecBole writes log/ there)."""
    job_file = Path(job["out"]).with_suffix(".job.json")
    if reusable(job_file, job):
        print(f"ncf bench peers: {job['model']} seed {job['seed']}: reused {job['out']} (same job)",
              file=sys.stderr)  # fmt: skip
        return textfile.read_json(job["out"])
    Path(job["out"]).unlink(missing_ok=True)  # ours: written by the runner of this job file
    job_file.write_text(json.dumps(job, indent=2) + "\n")
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    cmd = [str(python.absolute()), str(RUNNER), str(job_file.absolute())]
    print(f"ncf bench peers: {job['model']} seed {job['seed']}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(cmd, cwd=work, env=env, check=False)
    if proc.returncode != 0:
        raise BenchError(f"RecBole {job['model']} seed {job['seed']} failed (exit "
                         f"{proc.returncode}); rerun: {' '.join(cmd)}")  # fmt: skip
    return textfile.read_json(job["out"])


def ours_metrics(scores_file: Path) -> dict[str, Any]:
    """HR@10 / NDCG@10 of the scores of our candidates, by our own metric code, and the per-user
    test HR@10 (``test_hits``)."""
    out = {}
    with np.load(scores_file) as arrays:
        for split in ("valid", "test"):
            s = torch.from_numpy(arrays[f"{split}_scores"])
            pos = torch.where(torch.isinf(s[:, 0]), torch.nan, s[:, 0])  # unknown item: a miss
            hr, ndcg = hit_ndcg(pos, s[:, 1:], k=10)
            out[f"{split}_hr10"], out[f"{split}_ndcg10"] = hr.mean().item(), ndcg.mean().item()
            if split == "test":  # per test user, in the ETL's user order: for paired tests
                out["test_hits"] = [round(h, 6) for h in hr.tolist()]
    return out


def rows_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The table rows of one run: RecBole's protocol, and ours when it was scored."""
    train_s = sum(e["train_seconds"] for e in result["curve"])
    base = {
        "model": result["model"],
        "seed": result["seed"],
        "best_epoch": result["best_epoch"],
        "samples_per_s": round(result["train_samples_per_epoch"] * len(result["curve"]) / train_s),
    }
    v, t = result["valid"], result["test"]
    rows = [{**base, "protocol": PROTOCOL_RECBOLE, "valid_hr10": v["hit@10"],
             "valid_ndcg10": v["ndcg@10"], "test_hr10": t["hit@10"], "test_ndcg10": t["ndcg@10"]}]  # fmt: skip
    if "ours" in result:
        rows.append({**base, "protocol": PROTOCOL_OURS, **result["ours"]})
    for row in rows:
        for key in ("valid_hr10", "valid_ndcg10", "test_hr10", "test_ndcg10"):
            row[key] = round(row[key], 4)
    return rows


def run(cfg: PeersBench) -> Results:
    if cfg.etl is None:  # here, not in check(): every bench config resolves without flags
        raise ValueError("--etl: required; an `ncf etl --holdout valid,test` output folder")
    python = peers_python(cfg.venv)
    etl = cfg.etl
    name = cfg.name or f"peers-{etl.resolve().name}"
    work = cfg.work / name
    (work / "runs").mkdir(parents=True, exist_ok=True)
    counts = write_atomic(etl, work / "atomic", "ncf")
    candidates = write_candidates(etl, work / "candidates.npz") if cfg.ours else None
    results, rows = [], []
    for model in cfg.models:
        for seed in cfg.seeds:
            job = {
                "data_path": str((work / "atomic").absolute()),
                "dataset": "ncf",
                "model": model,
                "seed": seed,
                "epochs": cfg.epochs,
                "candidates": str(candidates.absolute()) if candidates else None,
                "checkpoint_dir": str((work / "checkpoints").absolute()),
                "out": str((work / "runs" / f"{model}-seed{seed}.json").absolute()),
            }
            result = run_job(python, job, work)
            if candidates is not None:
                scores = ours_metrics(Path(result["scores_file"]))
                result["ours_test_hits"] = scores.pop("test_hits")
                result["ours"] = scores
            results.append(result)
            rows += rows_of(result)
    title = (f"RecBole 1.2.1 on our split of {etl.resolve().name} ({cfg.epochs} epochs; epoch "
             "chosen on RecBole's validation NDCG@10; protocol: whose test negatives)")  # fmt: skip
    extra = {"etl": str(etl), "atomic_rows": counts, "runs": results}
    if candidates is not None:  # the users of every run's ours_test_hits, in that order
        with np.load(candidates) as arrays:
            extra["test_users"] = arrays["test_users"].tolist()
    return Results(name, rows, COLUMNS, title, cfg.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
