"""``ncf evaluate``: HR@K / NDCG@K of a checkpoint and of the ItemPop baseline on one ETL split.

Two candidate sets for each test user's held-out item: the ETL's sampled negatives
(``evaluate_model``, also run after every training epoch), and with ``--full-ranking`` every item
the user has not interacted with in training (``evaluate_full_ranking``: HR@K = Recall@K, NDCG@K,
MRR). Either way test users are sharded across ranks and the metric sums all-reduced, so every
rank gets the same figures.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ncf.core import names
from ncf.core.atomic import check_file_replaceable, write_json
from ncf.core.config import Config, flag, setting
from ncf.models import checkpoint, ranks
from ncf.models.data import EtlData, load_etl
from ncf.models.distributed import DEVICES, DistEnv, all_reduce_sum, process_group
from ncf.models.epoch import shard_bounds
from ncf.models.kinds import LABELS
from ncf.models.metrics import (
    full_ranking_metrics,
    hit_ndcg,
    item_popularity,
    itempop_hit_ndcg,
    seen_csr,
)
from ncf.models.presets import DEFAULT_EVAL_BATCH, DEFAULT_TOPK
from ncf.models.ranks import CPU_EVAL_CHUNK
from ncf.models.runtime import configure, default_threads

# users [U], items [C] (int64, on one device) -> float scores [U, C]
Scorer = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.inference_mode()
def evaluate_model(
    model: torch.nn.Module,
    data: EtlData,
    env: DistEnv,
    k: int = DEFAULT_TOPK,
    batch_size: int = DEFAULT_EVAL_BATCH,
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
    # As many batches on every rank (the last ones empty where a shard is shorter): a model
    # with sharded tables (models/sharding.py) looks rows up on every rank together.
    longest = -(-n_users // env.world_size)  # users of the longest shard
    for b in range(-(-longest // step)):
        s = min(lo + b * step, hi)
        e = min(s + step, hi)
        items = torch.cat((data.test_items[s:e, None], data.eval_negatives[s:e]), dim=1)  # [u, 1+N]
        users = data.test_users[s:e].repeat_interleave(per_user)  # [u * (1+N)]
        with torch.autocast(env.device.type, dtype=amp_dtype, enabled=amp):
            scores = model(users, items.reshape(-1)).float().view(e - s, per_user)
        if e == s:
            continue
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


def evaluate_itempop(data: EtlData, k: int = DEFAULT_TOPK) -> dict[str, float]:
    """HR@k, NDCG@k of ranking by training popularity on the same test items and negatives."""
    pop = item_popularity(data.train_items, data.num_items)
    hr, ndcg = itempop_hit_ndcg(pop, data.test_items, data.eval_negatives, k)
    return {
        "hr": float(hr.mean()) if hr.numel() else 0.0,
        "ndcg": float(ndcg.mean()) if ndcg.numel() else 0.0,
    }


def model_scorer(model: nn.Module, amp: bool = False) -> Scorer:
    """Scores of every (user, item) pair of a chunk: the model's ``score_matrix`` where it has one
    (MF: one matmul), else one batched forward over the ``U * C`` pairs. Puts ``model`` in eval mode.
    """
    model.eval()

    def score(users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        device = users.device.type
        dtype = torch.float16 if device == "cuda" else torch.bfloat16
        with torch.autocast(device, dtype=dtype, enabled=amp):
            if hasattr(model, "score_matrix"):
                return model.score_matrix(users, items).float()
            pairs = model(users.repeat_interleave(items.numel()), items.repeat(users.numel()))
        return pairs.float().view(users.numel(), items.numel())

    return score


def popularity_scorer(popularity: torch.Tensor) -> Scorer:
    """ItemPop as a scorer: every user gets the items' training counts (``popularity [num_items]``)."""
    return lambda users, items: popularity[items].unsqueeze(0).repeat(users.numel(), 1)


@torch.inference_mode()
def evaluate_full_ranking(
    scorer: Scorer,
    data: EtlData,
    env: DistEnv,
    k: int = DEFAULT_TOPK,
    batch_size: int = DEFAULT_EVAL_BATCH,
    known: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Full-ranking HR@k, NDCG@k and MRR over the test users of ``data`` (all ranks together).

    Each test user's held-out item is ranked against every item of ``item_id_range`` the user has
    no ``known`` interaction with (default: the training positives). Users go in chunks of about
    ``batch_size`` scores (``[chunk, C]``); rank ``r`` takes its contiguous shard of users. Returns
    ``{"hr", "ndcg", "mrr", "users", "candidates" (mean per user), "seconds"}``.
    """
    t0 = time.perf_counter()
    lo, hi = data.item_range
    users_all, items = data.test_users, torch.arange(lo, hi, device=env.device)
    known_users, known_items = known if known is not None else (data.train_users, data.train_items)
    indptr, cols = seen_csr(known_users, known_items, data.num_users, lo)
    first, last = shard_bounds(users_all.numel(), env.world_size, env.rank)
    cap = batch_size if env.device.type == "cuda" else min(batch_size, CPU_EVAL_CHUNK)
    step = max(1, cap // (hi - lo))
    sums = torch.zeros(5, dtype=torch.float64, device=env.device)  # hr ndcg mrr candidates users
    for s in range(first, last, step):
        e = min(s + step, last)
        users = users_all[s:e].long()
        scores = scorer(users, items)
        m = full_ranking_metrics(scores, data.test_items[s:e].long() - lo, users, indptr, cols, k)
        parts = [m["hr"].sum(), m["ndcg"].sum(), m["mrr"].sum(), m["candidates"].sum().double()]
        sums += torch.stack([*parts, torch.tensor(e - s, dtype=torch.float64, device=env.device)])
    all_reduce_sum(sums, env)
    hr, ndcg, mrr, candidates, n = sums.tolist()
    n_users = max(n, 1.0)
    return {
        "hr": hr / n_users,
        "ndcg": ndcg / n_users,
        "mrr": mrr / n_users,
        "users": int(n),
        "candidates": candidates / n_users,
        "seconds": time.perf_counter() - t0,
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


@dataclass
class EvaluateConfig(Config):
    """HR@K/NDCG@K of a checkpoint and of the ItemPop baseline"""

    data: Path | None = setting(None, help="ETL output directory, `ncf etl --out` (required)")
    checkpoint: Path | None = setting(None, help="checkpoint to test, RUN/best.pt (required)")
    out: Path | None = setting(
        None, help="also write the figures (and this config) to this JSON file, atomically"
    )
    topk: int = setting(DEFAULT_TOPK, help="K of HR@K and NDCG@K")
    eval_batch_size: int = setting(DEFAULT_EVAL_BATCH, help="samples scored at once")
    device: str = setting("auto", choices=DEVICES, help="auto: CUDA if available")
    amp: bool = flag(False, help="score under autocast (fp16 on CUDA, bf16 on CPU)")
    full_ranking: bool = flag(
        False,
        help="also rank each held-out item against every item the user has not interacted with "
        "in training (HR@K = Recall@K, NDCG@K, MRR), for the model and ItemPop",
    )
    suite: bool = flag(
        False,
        help="also HR, NDCG, MRR, Precision and MAP at 5, 10 and 20 for the model and ItemPop "
        "(sampled; full ranking too with --full-ranking, with item coverage and the average "
        "training popularity of the top-K items)",
    )
    per_user: Path | None = setting(
        None,
        help="with --suite: write each test user's rank counts (user_id, greater and ties of the "
        "held-out item per ranking) to this parquet file, atomically",
    )
    threads: int = setting(0, help="CPU threads per process (0: the cores / the local ranks)")
    force: bool = flag(False, help="replace an --out file that `ncf evaluate` wrote before")

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value."""
        for name in ("data", "checkpoint"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required; see `ncf evaluate --help`")
        if self.per_user is not None and not self.suite:
            raise ValueError(f"--per-user {self.per_user}: needs --suite (the counts it writes)")
        if self.topk < 1 or self.eval_batch_size < 1 or self.threads < 0:
            raise ValueError(
                f"--topk {self.topk} / --eval-batch-size {self.eval_batch_size} / --threads "
                f"{self.threads}: need >= 1 / >= 1 / >= 0"
            )


CONFIG = EvaluateConfig


def known_interactions(data: EtlData) -> tuple[torch.Tensor, torch.Tensor]:
    """What a test user is known to have interacted with: its training positives, plus its
    validation item where the ETL holds a validation split (excluded from the test ranking too)."""
    if not data.has_valid:
        return data.train_users, data.train_items
    users, items = data.valid_users.to(data.train_users), data.valid_items.to(data.train_items)
    return torch.cat((data.train_users, users)), torch.cat((data.train_items, items))


def full_ranking_report(
    model: nn.Module, data: EtlData, env: DistEnv, cfg: EvaluateConfig
) -> dict[str, float]:
    """Full-ranking figures of the model and of ItemPop, under the keys ``ncf evaluate`` writes."""
    k = cfg.topk
    known, batch = known_interactions(data), cfg.eval_batch_size
    full = evaluate_full_ranking(model_scorer(model, cfg.amp), data, env, k, batch, known)
    pop = popularity_scorer(item_popularity(data.train_items, data.num_items))
    pop_full = evaluate_full_ranking(pop, data, env, k, batch, known)
    out = {
        "full_candidates_per_user": full["candidates"],
        "full_ranking_seconds": full["seconds"],
        "itempop_full_ranking_seconds": pop_full["seconds"],
    }
    for prefix, r in (("", full), ("itempop_", pop_full)):
        out |= {f"{prefix}full_hr@{k}": r["hr"], f"{prefix}full_ndcg@{k}": r["ndcg"]}
        out[f"{prefix}full_mrr"] = r["mrr"]
    return out


def pair_scorer(model: nn.Module, amp: bool = False):
    """``score(users [n], items [n]) -> [n]`` float32 scores of ``model`` (eval mode, autocast as
    ``evaluate_model``)."""
    model.eval()

    def score(users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        device = users.device.type
        dtype = torch.float16 if device == "cuda" else torch.bfloat16
        with torch.autocast(device, dtype=dtype, enabled=amp):
            return model(users, items).float()

    return score


def suite_report(
    model: nn.Module, data: EtlData, env: DistEnv, cfg: EvaluateConfig
) -> tuple[dict, dict[str, torch.Tensor]]:
    """The metric suite (``report["suite"]``: ranking -> model/itempop -> figures) and each test
    user's rank counts (``ncf.models.ranks``), for the model and ItemPop."""
    batch = cfg.eval_batch_size
    pop = item_popularity(data.train_items, data.num_items)
    counts: dict[str, torch.Tensor] = {}
    suite: dict[str, dict] = {"sampled": {}, "full": {}}
    for prefix, name, score in (("", "model", pair_scorer(model, cfg.amp)),
                                ("itempop_", "itempop", lambda u, i: pop[i])):  # fmt: skip
        g, t = ranks.sampled_ranks(score, data, env, batch)
        counts[f"{prefix}greater"], counts[f"{prefix}ties"] = g, t
        suite["sampled"][name] = ranks.figures(g, t)
    if not cfg.full_ranking:
        del suite["full"]
        return suite, counts
    known = known_interactions(data)
    for prefix, name, scorer in (("", "model", model_scorer(model, cfg.amp)),
                                 ("itempop_", "itempop", popularity_scorer(pop))):  # fmt: skip
        r = ranks.full_ranks(scorer, data, env, batch, known)
        counts[f"{prefix}full_greater"], counts[f"{prefix}full_ties"] = r["greater"], r["ties"]
        extra = {
            k: float(v) for k, v in r.items() if k.startswith(("coverage@", "avg_popularity@"))
        }
        suite["full"][name] = ranks.figures(r["greater"], r["ties"]) | extra
        counts["full_candidates"] = r["candidates"]
    return suite, counts


def print_table(report: dict, k: int) -> None:
    """The figures of ``run`` as a small table on stdout (full-ranking columns when present)."""
    full = f"full_hr@{k}" in report
    head = f"{'model':8s} HR@{k}   NDCG@{k}" + (f" | full: HR@{k}  NDCG@{k} MRR" if full else "")
    print(head)
    for label, prefix in ((LABELS[report["model"]], ""), ("ItemPop", "itempop_")):
        line = f"{label:8s} {report[f'{prefix}hr@{k}']:.4f}  {report[f'{prefix}ndcg@{k}']:.4f} "
        if full:
            line += f" |       {report[f'{prefix}full_hr@{k}']:.4f}  {report[f'{prefix}full_ndcg@{k}']:.4f}"
            line += f"  {report[f'{prefix}full_mrr']:.4f}"
        print(line)


def report_of(cfg: EvaluateConfig, env: DistEnv) -> tuple[dict, EtlData]:
    """The figures ``ncf evaluate`` prints and writes (every rank), and the data they are on."""
    data = load_etl(cfg.data, env.device)
    model, state = checkpoint.load_model(cfg.checkpoint, map_location=env.device)
    check_compatible(state, data, cfg.checkpoint)
    res = evaluate_model(model, data, env, cfg.topk, cfg.eval_batch_size, cfg.amp)
    pop = evaluate_itempop(data, cfg.topk)
    k = cfg.topk
    report = {
        "checkpoint": str(cfg.checkpoint),
        "data": str(cfg.data),
        "model": checkpoint.model_kind(state),
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
        "amp": bool(cfg.amp),
    }
    if cfg.full_ranking:
        report |= full_ranking_report(model, data, env, cfg)
    if cfg.suite:
        report["suite"], counts = suite_report(model, data, env, cfg)
        if cfg.per_user is not None and env.is_main:
            ranks.write_per_user(cfg.per_user, data.test_users, counts)
    return report, data


def is_report(path: Path) -> bool:
    """True if ``path`` is a JSON result of ``ncf evaluate --out`` (its config under "config")."""
    doc = load_json_or_none(path)
    config = doc.get("config") if isinstance(doc, dict) else None
    return isinstance(config, dict) and {"data", "checkpoint", "topk"} <= set(config)


def is_per_user(path: Path) -> bool:
    """True if ``path`` is a per-user file of ``ncf evaluate --per-user`` (a parquet file whose
    columns are ``user_id`` and rank counts)."""
    try:
        import pyarrow.parquet as pq

        columns = pq.read_schema(path).names
    except (OSError, ValueError, ImportError):
        return False
    return columns[:3] == [names.USER, "greater", "ties"]


def load_json_or_none(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run(cfg: EvaluateConfig) -> int:
    """Score ``cfg.checkpoint``; print the table (rank 0) and write ``cfg.out`` if set; 0."""
    if cfg.out:  # before the scoring: a result that cannot be written is refused at once
        check_file_replaceable(cfg.out, "evaluate", cfg.force, None, recognise=is_report)
    if cfg.per_user:
        check_file_replaceable(
            cfg.per_user, "evaluate", cfg.force, None, recognise=is_per_user, flag="--per-user"
        )
    with process_group(cfg.device) as env:
        threads = cfg.threads or default_threads(env.local_world_size)
        configure(env.device, threads, deterministic=False)
        report, data = report_of(cfg, env)
        if env.is_main:
            k = cfg.topk
            print_table(report, k)
            print(
                f"epoch {report['epoch']}; {report['users']} users x "
                f"{report['negatives_per_user']} negatives, {report['eval_throughput']:,.0f} "
                f"samples/s on {env.device}"
            )
            if cfg.full_ranking:
                print(
                    f"full ranking: {report['full_candidates_per_user']:,.0f} candidates per user "
                    f"on average, {report['full_ranking_seconds']:.2f} s"
                )
            if cfg.out:
                write_json(cfg.out, {**report, "config": cfg.replace(threads=threads).to_dict()})
    return 0
