"""A model of data-parallel NeuMF training on many GPUs: step time = compute per rank + all-reduce.

    python -m ncf.bench.scaling      # the tables of docs/SCALING.md, from bench/results

The model (docs/SCALING.md says where each input comes from):

* compute per rank at global batch ``B`` over ``p`` ranks: ``c + (t1 - c) / p``, where ``t1`` is
  one GPU's measured step at batch ``B`` and ``c`` the part every rank repeats whatever ``p``
  (the optimizer over every parameter of the replicated model, per-step launches);
* the gradient all-reduce: a ring sends ``2 (p - 1) / p`` times the payload (parameters x bytes per
  element) from each rank, over the slowest link of the ring: NVLink inside a node, the node's
  NICs between nodes (NCCL runs one ring per NIC, so a node's rings leave it through all of them);
  bandwidth only (no latency term), and no overlap with compute (the embedding tables, nearly all
  of the bytes, get their gradients last in the backward pass);
* samples/s = ``B / (compute + all-reduce)``;
* with the tables sharded by rows (``--shard-embeddings``): each rank updates only its block of
  the tables (``c`` loses the rest of their per-parameter traffic), DDP all-reduces the MLP
  alone, and the lookups' all-to-alls send each rank's remote samples' ids, rows and row
  gradients (``alltoall_seconds``: measured bytes per remote sample, over NVLink inside a node
  and the rank's own NIC to other nodes).

Pure functions; ``main`` feeds them the repository's measurements and the published figures.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.core import textfile
from ncf.core.config import Config, setting

# Published figures (docs/FACTS.md, "Link and memory bandwidths"), bytes/s per direction.
NVLINK4_GPU = 450e9  # H100/H200: 18 NVLink 4 links, 900 GB/s both directions together
NVLINK2_GPU = 150e9  # V100: 6 NVLink 2 links, 300 GB/s both directions together
NDR_NIC = 50e9  # InfiniBand NDR: 400 Gb/s per port
H200_HBM = 4.8e12
GPUS_PER_NODE = 8  # DGX H200 / HGX H200: 8 GPUs, 8 single-port ConnectX-7 NICs
NICS_PER_NODE = 8
# Bytes each rank moves per parameter per step beside the all-reduce: the dense embedding
# gradient's zero fill (4), fused Adam (read param, grad, two moments: 16; write three: 12), DDP's
# copies of the gradient into its bucket and back (16) and the hook's division (8).
REPLICATED_BYTES_PER_PARAM = 56
# The same for a row of a sharded table, updated by its owner only: the zero fill (4) and fused
# Adam (28); DDP's bucket copies and the hook's division are gone.
SHARDED_BYTES_PER_PARAM = 32
# MLPerf's expanded MovieLens (ml-20mx16x32; docs/FACTS.md) and ML-20m.
ML20M = {"users": 138_493, "items": 26_744, "positives": 20_000_263 - 138_493}
EXPANDED = {"users": 2_197_225, "items": 855_776, "positives": 1_223_962_043}
CATEGORIFY_RESERVED = 3  # low ids Categorify reserves in each table (docs/FACTS.md)


def ring_factor(ranks: int) -> float:
    """Bytes a rank sends in a ring all-reduce per byte of payload: ``2 (p - 1) / p``."""
    return 2 * (ranks - 1) / ranks


def allreduce_seconds(payload: float, ranks: int, link: float) -> float:
    """Seconds of a ring all-reduce of ``payload`` bytes over ``ranks``, each rank's link ``link``
    bytes/s per direction (bandwidth term only)."""
    return ring_factor(ranks) * payload / link if ranks > 1 else 0.0


def ring_link(ranks: int, gpus_per_node: int, nvlink: float, nic: float, nics: int) -> float:
    """Bytes/s per rank of a ring over ``ranks`` GPUs: NVLink within one node, else the slower of
    NVLink and the node's NICs together (each ring leaves a node once, through its own NIC)."""
    return nvlink if ranks <= gpus_per_node else min(nvlink, nics * nic)


def compute_seconds(one_gpu_step: float, replicated: float, ranks: int) -> float:
    """Seconds of one rank's share of a global batch: ``c + (t1 - c) / p``."""
    return replicated + (one_gpu_step - replicated) / ranks


def fit_replicated(one_gpu_step: float, step: float, ranks: int, allreduce: float) -> float:
    """``c`` such that ``compute_seconds(t1, c, p) + allreduce == step`` (a measured p-GPU step)."""
    return (step - allreduce - one_gpu_step / ranks) / (1 - 1 / ranks)


def alltoall_seconds(
    batch: int, ranks: int, bytes_per_sample: float, nvlink: float, nic: float, gpus_per_node: int
) -> float:
    """Seconds of one step's table all-to-alls: each rank looks up ``batch / p`` samples, of whose
    rows ``(p - 1) / p`` live on other ranks, each costing ``bytes_per_sample`` sent; of those
    ranks ``(p - g) / (p - 1)`` are on other nodes, reached through the rank's NIC (``nic``), the
    others over NVLink, both at once (bandwidth only)."""
    if ranks == 1:
        return 0.0
    remote = batch / ranks * (ranks - 1) / ranks * bytes_per_sample
    off_node = max(ranks - gpus_per_node, 0) / (ranks - 1)
    return max(remote * (1 - off_node) / nvlink, remote * off_node / nic)


def table_params(
    users: int, items: int, factors: int = 64, layers: tuple[int, ...] = (256, 256, 128, 64)
) -> int:
    """Parameters of NeuMF's four embedding tables (what ``--shard-embeddings`` shards)."""
    return (users + items) * (factors + layers[0] // 2)


def neumf_params(
    users: int, items: int, factors: int = 64, layers: tuple[int, ...] = (256, 256, 128, 64)
) -> int:
    """Parameters of NeuMF (``ncf.models.neumf``): four embedding tables, the MLP, the output."""
    embeddings = table_params(users, items, factors, layers)
    mlp = sum(a * b + b for a, b in pairwise(layers))
    return embeddings + mlp + layers[-1] + factors + 1


def sampler_bytes(users: int, items: int, positives: int, ranks: int = 1) -> dict[str, float]:
    """Bytes per rank of the exact-negative membership set (``ncf.models.sampling``): the bitmap
    (one bit per user x item) and the sorted int64 keys, each whole or sharded by user over
    ``ranks`` (a rank keeps the rows of its users only)."""
    bitmap, keys = users * items / 8, 8 * positives
    return {"bitmap": bitmap, "sorted": keys, "bitmap_sharded": bitmap / ranks,
            "sorted_sharded": keys / ranks}  # fmt: skip


def epoch_plan_bytes(positives: int, negatives_per_positive: int = 4) -> float:
    """Bytes per rank of an epoch's plan (``ncf.models.epoch``): the int32 training pairs, the
    int32 negatives and the permutation of all samples (int64 from 2**31 samples on)."""
    samples = positives * (1 + negatives_per_positive)
    perm = samples * (8 if samples >= 2**31 else 4)
    return 2 * 4 * positives + 4 * positives * negatives_per_positive + perm


@dataclass(frozen=True)
class Setup:
    """Everything the prediction of one model size needs."""

    batch: int  # global batch
    one_gpu_step: float  # s, measured at ``batch``
    replicated: float  # s, ``c``
    params: int
    bytes_per_param: float  # all-reduced bytes per parameter (4 fp32, 2 fp16)


def samples_per_second(s: Setup, ranks: int, link: float) -> float:
    """The model's throughput of ``ranks`` GPUs whose ring runs at ``link`` bytes/s per rank."""
    comm = allreduce_seconds(s.params * s.bytes_per_param, ranks, link)
    return s.batch / (compute_seconds(s.one_gpu_step, s.replicated, ranks) + comm)


# -- the repository's measurements and the published figures --------------------------------------
DLE_DGX2 = {  # DLE's DGX-2 (16x V100 32GB) samples/s at global batch 1,048,576: docs/FACTS.md
    "amp": {1: 22.16e6, 8: 98.56e6, 16: 134.91e6},
    "fp32": {1: 10.90e6, 8: 62.16e6, 16: 92.20e6},
}
BATCH = 1 << 20


def _ml20m_params() -> int:
    r = CATEGORIFY_RESERVED
    return neumf_params(ML20M["users"] + r, ML20M["items"] + r)


def validate_on_dle() -> list[dict]:
    """Fit ``c`` on DLE's 1- and 8-GPU DGX-2 figures, predict its 16-GPU one."""
    rows = []
    params = _ml20m_params()
    for precision, figures in DLE_DGX2.items():
        t1, t8 = BATCH / figures[1], BATCH / figures[8]
        c = fit_replicated(t1, t8, 8, allreduce_seconds(params * 4, 8, NVLINK2_GPU))
        s = Setup(BATCH, t1, c, params, 4)
        rows.append({"precision": precision, "t1_ms": t1 * 1e3, "c_ms": c * 1e3,
                     "predicted_16": samples_per_second(s, 16, NVLINK2_GPU),
                     "published_16": figures[16]})  # fmt: skip
    return rows


def _measured(results: Path) -> tuple[dict, dict]:
    """One H200's step per precision (train-cuda.json) and the bytes all-reduced per parameter
    per compression (train-comm.json, 2 processes)."""
    cuda = textfile.read_json(results / "train-cuda.json")["rows"]
    steps = {r["precision"]: r["step_s"] for r in cuda if r["batch"] == BATCH}
    comm = textfile.read_json(results / "train-comm.json")["rows"]
    per_param = {
        r["grad_compression"]: r["allreduce_mb_per_step"] * 1e6 / r["grad_params"]
        for r in comm
        if r["procs"] == 2
    }
    return steps, per_param


def alltoall_bytes_per_sample(results: Path) -> float:
    """Bytes a rank's table all-to-alls send per sample of its batch share whose rows another rank
    owns, on ML-20m-sized data (train-shard.json's sharded points): the largest, that of the
    smallest share (fewer repeated ids to send once)."""
    rows = textfile.read_json(results / "train-shard.json")["rows"]
    per = [
        r["alltoall_mb_per_step"] * 1e6 / (r["batch"] / r["procs"] * (r["procs"] - 1) / r["procs"])
        for r in rows
        if r.get("shard_embeddings")
    ]
    return max(per)


def alltoall_bytes_bound(factors: int = 64, layers: tuple[int, ...] = (256, 256, 128, 64)) -> int:
    """Bytes per remote sample when no id repeats: for each of the four tables its int64 id, its
    row forward and the row's gradient backward, fp32."""
    return 4 * 8 + 2 * 4 * (2 * factors + layers[0])


def predict(results: Path = RESULTS_DIR, ranks=(1, 8, 16, 32, 64)) -> list[dict]:
    """Samples/s on H200 nodes per GPU count, model size and all-reduce (AMP compute).

    ``c`` is DLE's (``validate_on_dle``) plus, for bigger tables, their extra per-parameter traffic
    at the H200's memory bandwidth; the per-sample part ``t1 - c`` is the measured ML-20m one
    (the same widths per sample whatever the table sizes).
    """
    steps, per_param = _measured(results)
    # ML-20m: measured; the expanded tables: the bound (its ids repeat less within a batch)
    remote = {"ML-20m": alltoall_bytes_per_sample(results), "expanded": alltoall_bytes_bound()}
    c20 = {row["precision"]: row["c_ms"] / 1e3 for row in validate_on_dle()}["amp"]
    per_sample = steps["amp"] - c20
    r = CATEGORIFY_RESERVED
    sizes = {"ML-20m": (ML20M["users"] + r, ML20M["items"] + r),
             "expanded": (EXPANDED["users"] + r, EXPANDED["items"] + r)}  # fmt: skip
    rows = []
    for name, (users, items) in sizes.items():
        params, tables = neumf_params(users, items), table_params(users, items)
        c = c20 + (params - _ml20m_params()) * REPLICATED_BYTES_PER_PARAM / H200_HBM
        for p in ranks:
            link = ring_link(p, GPUS_PER_NODE, NVLINK4_GPU, NDR_NIC, NICS_PER_NODE)
            row = {"model": name, "params": params, "gpus": p, "link_gb_s": link / 1e9,
                   "compute_ms": 1e3 * compute_seconds(c + per_sample, c, p)}  # fmt: skip
            for comp in ("none", "fp16"):
                s = Setup(BATCH, c + per_sample, c, params, per_param[comp])
                row[f"samples_per_s_{comp}"] = samples_per_second(s, p, link)
                payload = params * per_param[comp]
                row[f"allreduce_ms_{comp}"] = 1e3 * allreduce_seconds(payload, p, link)
            row.update(_sharded(c, per_sample, params, tables, p, link, remote[name]))
            rows.append(row)
    return rows


def _sharded(
    c: float, per_sample: float, params: int, tables: int, p: int, link: float, remote: float
) -> dict:
    """The sharded option's figures at ``p`` GPUs (``predict``'s row keys)."""
    if p == 1:  # nothing to shard
        s = Setup(BATCH, c + per_sample, c, params, 4)
        return {"alltoall_ms": 0.0, "samples_per_s_sharded": samples_per_second(s, 1, link)}
    # each rank's table traffic: its block only, without DDP's copies
    saved = tables * (REPLICATED_BYTES_PER_PARAM - SHARDED_BYTES_PER_PARAM / p) / H200_HBM
    a2a = alltoall_seconds(BATCH, p, remote, NVLINK4_GPU, NDR_NIC, GPUS_PER_NODE)
    mlp = allreduce_seconds((params - tables) * 4, p, link)  # DDP's fp32 all-reduce of the rest
    step = compute_seconds(c + per_sample, c, p) - saved + mlp + a2a
    return {"alltoall_ms": 1e3 * a2a, "samples_per_s_sharded": BATCH / step}


def _print_sampler() -> None:
    print("| data | positives | bitmap | sorted keys | bitmap / sorted, by user over 8 | "
          "over 64 | epoch plan |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, d in (("ML-20m", ML20M), ("expanded", EXPANDED)):
        b8, b64 = sampler_bytes(**d, ranks=8), sampler_bytes(**d, ranks=64)
        print(f"| {name} | {d['positives'] / 1e6:,.1f}M | {b8['bitmap'] / 1e9:.2f} GB | "
              f"{b8['sorted'] / 1e9:.2f} GB | {b8['bitmap_sharded'] / 1e9:.2f} / "
              f"{b8['sorted_sharded'] / 1e9:.2f} GB | {b64['bitmap_sharded'] / 1e9:.2f} / "
              f"{b64['sorted_sharded'] / 1e9:.2f} GB | "
              f"{epoch_plan_bytes(d['positives']) / 1e9:.1f} GB |")  # fmt: skip


@dataclass
class ScalingModel(Config):
    """The step-time model of docs/SCALING.md, fed with the measured steps and bytes."""

    results_dir: Path = setting(
        RESULTS_DIR,
        help="where train-cuda.json (one GPU's step), train-comm.json and train-shard.json "
        "(bytes) are",
    )


CONFIG = ScalingModel


def run(cfg: ScalingModel) -> int:
    """Print the validation, prediction and sampler tables (markdown)."""
    predicted = predict(cfg.results_dir)  # reads the measurements first: a missing one, no table
    print("| precision | t1 ms | fitted c ms | predicted 16 GPUs | published 16 GPUs |")
    print("|---|---|---|---|---|")
    for r in validate_on_dle():
        print(f"| {r['precision']} | {r['t1_ms']:.2f} | {r['c_ms']:.2f} | "
              f"{r['predicted_16'] / 1e6:.1f}M | {r['published_16'] / 1e6:.1f}M |")  # fmt: skip
    print()
    print("| model | GPUs | ring GB/s | compute ms | all-reduce ms fp32 / fp16 | "
          "samples/s fp32 DDP | samples/s fp16 compression | all-to-all ms sharded | "
          "samples/s sharded |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in predicted:
        link = f"{r['link_gb_s']:.0f}" if r["gpus"] > 1 else "-"
        print(f"| {r['model']} ({r['params'] / 1e6:.1f}M) | {r['gpus']} | {link} | "
              f"{r['compute_ms']:.2f} | {r['allreduce_ms_none']:.2f} / {r['allreduce_ms_fp16']:.2f}"
              f" | {r['samples_per_s_none'] / 1e6:.1f}M | {r['samples_per_s_fp16'] / 1e6:.1f}M | "
              f"{r['alltoall_ms']:.2f} | {r['samples_per_s_sharded'] / 1e6:.1f}M |")  # fmt: skip
    print()
    _print_sampler()
    return 0


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
