"""``ncf evaluate``: HR@K / NDCG@K of a checkpoint and of the ItemPop baseline on one ETL split.

Also the evaluation used after every training epoch: test users are sharded across ranks and the
metric sums all-reduced, so every rank gets the same figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from models import checkpoint
from models.data import EtlData, load_etl
from models.distributed import DistEnv, all_reduce_sum, process_group
from models.epoch import shard_bounds
from models.metrics import hit_ndcg, item_popularity, itempop_hit_ndcg
from models.runtime import configure, default_threads
from ncf.atomic import write_json

CPU_EVAL_CHUNK = 1 << 16  # samples scored at once on a CPU: activations stay cache-sized


@torch.inference_mode()
def evaluate_model(
    model: torch.nn.Module,
    data: EtlData,
    env: DistEnv,
    k: int = 10,
    batch_size: int = 1 << 20,
    amp: bool = False,
) -> dict[str, float]:
    """HR@k, NDCG@k over the test users of ``data`` (all ranks together) and timing.

    Each test user's held-out item is scored with its ``N`` cached negatives; rank ``r`` scores
    its contiguous shard of users. Returns ``{"hr", "ndcg", "users", "samples", "seconds"}``.
    """
    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    n_users, n_neg = data.eval_negatives.shape
    lo, hi = shard_bounds(n_users, env.world_size, env.rank)
    per_user = 1 + n_neg
    cap = batch_size if env.device.type == "cuda" else min(batch_size, CPU_EVAL_CHUNK)
    step = max(1, cap // per_user)
    sums = torch.zeros(3, dtype=torch.float64, device=env.device)  # hr, ndcg, users
    amp_dtype = torch.float16 if env.device.type == "cuda" else torch.bfloat16
    for s in range(lo, hi, step):
        e = min(s + step, hi)
        items = torch.cat((data.test_items[s:e, None], data.eval_negatives[s:e]), dim=1)  # [u, 1+N]
        users = data.test_users[s:e].repeat_interleave(per_user)  # [u * (1+N)]
        with torch.autocast(env.device.type, dtype=amp_dtype, enabled=amp):
            scores = model(users, items.reshape(-1)).float().view(e - s, per_user)
        hr, ndcg = hit_ndcg(scores[:, 0], scores[:, 1:], k)
        sums += torch.stack(
            (
                hr.sum(),
                ndcg.sum(),
                torch.tensor(float(e - s), dtype=torch.float64, device=env.device),
            )
        )
    all_reduce_sum(sums, env)
    model.train(was_training)
    hr_sum, ndcg_sum, users_total = sums.tolist()
    users_total = max(users_total, 1.0)
    return {
        "hr": hr_sum / users_total,
        "ndcg": ndcg_sum / users_total,
        "users": int(users_total),
        "samples": int(users_total) * per_user,
        "seconds": time.perf_counter() - t0,
    }


def evaluate_itempop(data: EtlData, k: int = 10) -> dict[str, float]:
    """HR@k, NDCG@k of ranking by training popularity on the same test items and negatives."""
    pop = item_popularity(data.train_items, data.num_items)
    hr, ndcg = itempop_hit_ndcg(pop, data.test_items, data.eval_negatives, k)
    return {
        "hr": float(hr.mean()) if hr.numel() else 0.0,
        "ndcg": float(ndcg.mean()) if ndcg.numel() else 0.0,
    }


def check_compatible(state: dict, data: EtlData, where: Path) -> None:
    """Raise if the checkpoint's embedding sizes do not fit the split; warn if it came from other data."""
    cfg = state["config"]
    if (cfg["num_users"], cfg["num_items"]) != (data.num_users, data.num_items):
        raise ValueError(
            f"{where}: model has num_users={cfg['num_users']}, num_items={cfg['num_items']} but "
            f"{data.path}/metadata.json has {data.num_users}, {data.num_items}; evaluate on the ETL "
            f"output it was trained on ({state.get('data', {}).get('etl_dir', '?')})"
        )
    trained_on = state.get("data", {}).get("metadata_sha256")
    if trained_on and trained_on != data.metadata_sha256:
        print(
            f"ncf evaluate: warning: {where} was trained on another ETL output "
            f"({state['data'].get('etl_dir')}); figures are on {data.path}",
            file=sys.stderr,
        )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=Path, required=True, help="ETL output directory (`ncf etl --out`)"
    )
    p.add_argument(
        "--checkpoint", type=Path, required=True, help="checkpoint to test (RUN/best.pt)"
    )
    p.add_argument("--out", type=Path, help="also write the figures to this JSON file (atomically)")
    p.add_argument(
        "--topk", type=int, default=10, help="K of HR@K and NDCG@K (default: %(default)s)"
    )
    p.add_argument(
        "--eval-batch-size",
        type=int,
        default=1 << 20,
        help="samples scored at once (default: %(default)s)",
    )
    p.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: %(default)s"
    )
    p.add_argument(
        "--amp", action="store_true", help="score under autocast (fp16 on CUDA, bf16 on CPU)"
    )
    p.add_argument(
        "--threads", type=int, help="CPU threads per process (default: cores / local ranks)"
    )


def run(args: argparse.Namespace) -> int:
    with process_group(args.device) as env:
        configure(
            env.device, args.threads or default_threads(env.local_world_size), deterministic=False
        )
        data = load_etl(args.data, env.device)
        model, state = checkpoint.load_model(args.checkpoint, map_location=env.device)
        check_compatible(state, data, args.checkpoint)
        res = evaluate_model(model, data, env, args.topk, args.eval_batch_size, args.amp)
        pop = evaluate_itempop(data, args.topk)
        k = args.topk
        report = {
            "checkpoint": str(args.checkpoint),
            "data": str(args.data),
            "epoch": state["epoch"],
            f"hr@{k}": res["hr"],
            f"ndcg@{k}": res["ndcg"],
            f"itempop_hr@{k}": pop["hr"],
            f"itempop_ndcg@{k}": pop["ndcg"],
            "users": res["users"],
            "negatives_per_user": int(data.eval_negatives.shape[1]),
            "eval_throughput": res["samples"] / max(res["seconds"], 1e-9),
            "device": str(env.device),
            "world_size": env.world_size,
            "amp": bool(args.amp),
        }
        if env.is_main:
            print(
                f"{'model':8s} HR@{k} {res['hr']:.4f}  NDCG@{k} {res['ndcg']:.4f}  (epoch {state['epoch']})"
            )
            print(f"{'ItemPop':8s} HR@{k} {pop['hr']:.4f}  NDCG@{k} {pop['ndcg']:.4f}")
            print(
                f"{res['users']} users x {data.eval_negatives.shape[1]} negatives, "
                f"{report['eval_throughput']:,.0f} samples/s on {env.device}"
            )
            if args.out:
                write_json(args.out, report)
    return 0
