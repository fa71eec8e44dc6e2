"""Top-k recommendation at ML-20m size: exact catalogue scoring (fp32, bf16) and the two-stage path.

In process (what ``neumf_catalogue`` + ``recommend`` compute per request, without Triton): for 1
user and for a batch of 64, the catalogue scorer of ``serving/catalogue.py`` (TorchScript, as
exported) scores every item and the top-k is selected; the two-stage path takes the
``--ann-candidates`` items nearest to the user's GMF vector in a faiss index and re-ranks them
with the same network (``score_items``). Each row: p50/p99 latency, requests/s, users/s and
catalogue items scored per second, and its agreement with exact fp32 (bf16: max abs difference of
the probabilities and top-k overlap; two-stage: recall of the exact top-k), measured on
``--quality-users`` users. With ``--repo`` (an ``ncf export`` of the same shape) the real
tritonserver's ``recommend`` is timed too (HTTP, one client), for each precision and path.

The model: ``--checkpoint`` (a trained NeuMF, needed for meaningful recall figures) or a randomly
initialised NeuMF of the dle preset's shape with ``--users`` x ``--items`` (ML-20m's 138,493 x
26,744 by default; speed only).
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.models.checkpoint import load_model
from ncf.models.neumf import NeuMF, NeuMFConfig
from ncf.serving import retrieval
from ncf.serving.catalogue import CatalogueNeuMF, to_precision
from ncf.serving.export import gmf_tables

RESERVED = 3  # Categorify's reserved codes below the first real id
COLUMNS = (
    "where",
    "path",
    "precision",
    "batch",
    "requests",
    "lat_min_ms",
    "lat_p50_ms",
    "lat_p99_ms",
    "req_per_s",
    "users_per_s",
    "items_scored_per_s",
    "max_abs_diff",
    "topk_vs_exact_fp32",
)


@dataclass
class RecommendBench(Config):
    """Top-k over the whole catalogue: exact fp32/bf16, two-stage."""

    checkpoint: Path | None = setting(None, help="trained NeuMF (default: random)")
    users: int = setting(138_493, help="users of the random model")
    items: int = setting(26_744, help="catalogue of the random model")
    batch_sizes: list[int] = setting(default_factory=lambda: [1, 64], help="users/request")
    k: int = setting(10, help="recommendations per user")
    requests: int = setting(40, help="timed requests per row (batch 1)")
    user_budget: int = setting(640, help="users timed per batched row")
    ann_index: list[str] = setting(default_factory=lambda: ["HNSW32", "Flat"], help="faiss indexes")
    ann_candidates: list[int] = setting(
        default_factory=lambda: [200, 1000, 2000], help="candidates of the two-stage path"
    )
    ef_search: int = setting(256, help="HNSW efSearch")
    quality_users: int = setting(256, help="users of the agreement figures")
    repo: Path | None = setting(None, help="exported repository: time tritonserver")
    threads: int = setting(
        0, help="torch threads, here and in the served scorer (0: their defaults)"
    )
    seed: int = setting(DEFAULT_SEED, help="seed of the random model and the users")
    make_checkpoint: Path | None = setting(
        None,
        help="only write a random dle-shaped checkpoint for --data's ETL here (for ncf export)",
    )
    data: Path | None = setting(None, help="ETL directory of --make-checkpoint")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")
    name: str = setting("recommend", help="results file stem")

    def check(self) -> None:
        if self.k < 1 or min(self.batch_sizes) < 1 or self.requests < 2 or self.quality_users < 1:
            raise ValueError("--k, --batch-sizes, --quality-users must be >= 1 and --requests >= 2")
        if min(self.ann_candidates) < self.k:
            raise ValueError(
                f"--ann-candidates {self.ann_candidates}: each must be >= --k {self.k}"
            )
        if self.make_checkpoint is not None and self.data is None:
            raise ValueError(
                "--make-checkpoint needs --data ETL_DIR (its metadata gives the sizes)"
            )


CONFIG = RecommendBench


# -- the model and its scorers ---------------------------------------------------------------


def build_model(args: RecommendBench) -> tuple[NeuMF, int, int, str]:
    """(model, item_lo, item_hi, description): the checkpoint's, or a random dle-shaped one."""
    if args.checkpoint is not None:
        model, ckpt = load_model(args.checkpoint)
        lo = RESERVED if model.cfg.num_items > RESERVED else 0
        return model.eval(), lo, model.cfg.num_items, f"checkpoint {args.checkpoint}"
    model = _random(args.seed, args.users + RESERVED, args.items + RESERVED)
    return model, RESERVED, model.cfg.num_items, "random NeuMF, dle preset shape"


def _random(seed: int, num_users: int, num_items: int) -> NeuMF:
    torch.manual_seed(seed)
    model = NeuMF(NeuMFConfig(num_users=num_users, num_items=num_items)).eval()
    with torch.no_grad():  # DLE's N(0, 0.01) embeddings make every score ~0.5: spread them
        for emb in (model.mf_user_embed, model.mf_item_embed):
            emb.weight.normal_(0.0, 0.3)
    return model


def make_checkpoint(path: Path, etl_dir: Path, seed: int) -> Path:
    """A random NeuMF of the dle preset's shape for ``etl_dir``, saved as ``ncf train`` does."""
    from ncf.core.digest import sha256_file
    from ncf.models.checkpoint import save
    from ncf.models.data import read_metadata

    meta, _ = read_metadata(etl_dir)
    model = _random(seed, meta["num_users"], meta["num_items"])
    path.parent.mkdir(parents=True, exist_ok=True)
    source = {
        "etl_dir": str(etl_dir),
        "metadata_sha256": sha256_file(etl_dir / names.METADATA_FILE),
    }
    state = {"model": model.state_dict(), "config": model.cfg.to_dict(), "epoch": 0}
    save(path, {**state, "metrics": {}, "data": source})
    return path


def scorers(model: NeuMF, lo: int, hi: int) -> dict[str, torch.jit.ScriptModule]:
    """The exported TorchScript catalogue scorer, loaded once per precision."""
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(CatalogueNeuMF(model, lo, hi).eval()), buf)
    out = {}
    for precision in ("fp32", "bf16"):
        module = torch.jit.load(io.BytesIO(buf.getvalue()), map_location="cpu").eval()
        out[precision] = to_precision(module, precision)
    return out


# -- one request ---------------------------------------------------------------------------


def exact(scorer, users: np.ndarray, k: int) -> np.ndarray:
    """Top-k catalogue positions of ``users`` [B] scoring every item."""
    with torch.inference_mode():
        scores = scorer(torch.from_numpy(users).reshape(-1, 1))[0].numpy()
    positions = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    return retrieval.top_k(positions, scores, k)[0]


def two_stage(scorer, index, queries, users, n: int, k: int, lo: int, ef: int = 256) -> np.ndarray:
    """Top-k positions from the ``n`` GMF neighbours re-ranked by the network."""
    cand = retrieval.search(index, queries[users], n, ef)
    u = torch.from_numpy(users).reshape(-1, 1)

    def score(ids: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return scorer.score_items(u, torch.from_numpy(ids))[0].numpy()

    return retrieval.top_k(cand, retrieval.rerank(cand, score, lo), k)[0]


def timed(fn, batches: list[np.ndarray]) -> np.ndarray:
    """Seconds per call of ``fn`` on each batch (one warm-up call first)."""
    fn(batches[0])
    out = []
    for batch in batches:
        t0 = time.perf_counter()
        fn(batch)
        out.append(time.perf_counter() - t0)
    return np.asarray(out)


def row(where, path, precision, batch, seconds, n_items, quality=None) -> dict:
    p50, p99 = np.percentile(seconds, [50, 99])
    mean = float(seconds.mean())
    return {
        "where": where,
        "path": path,
        "precision": precision,
        "batch": batch,
        "requests": int(seconds.size),
        "lat_min_ms": float(seconds.min()) * 1e3,  # the floor: the rate without contention
        "lat_p50_ms": float(p50) * 1e3,
        "lat_p99_ms": float(p99) * 1e3,
        "req_per_s": 1 / mean,
        "users_per_s": batch / mean,
        "items_scored_per_s": batch * n_items / mean,
        **(quality or {}),
    }


# -- agreement with exact fp32 -------------------------------------------------------------


def quality(model_scorers, index_of, queries, users, k, lo, candidates, ef) -> dict[str, dict]:
    """Key ("exact", precision) / (spec, n, precision) -> agreement with exact fp32's top-k."""
    want = exact(model_scorers["fp32"], users, k)
    with torch.inference_mode():
        u = torch.from_numpy(users).reshape(-1, 1)
        fp32 = model_scorers["fp32"](u)[0]
        bf16 = model_scorers["bf16"](u)[0]

    def overlap(got: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(want, got, strict=True)]))

    out = {("exact", "fp32"): {"max_abs_diff": 0.0, "topk_vs_exact_fp32": 1.0}}
    out[("exact", "bf16")] = {
        "max_abs_diff": float((bf16 - fp32).abs().max()),
        "topk_vs_exact_fp32": overlap(exact(model_scorers["bf16"], users, k)),
    }
    for spec, index in index_of.items():
        for n in candidates:
            for precision, scorer in model_scorers.items():
                got = two_stage(scorer, index, queries, users, n, k, lo, ef)
                out[(spec, n, precision)] = {"topk_vs_exact_fp32": overlap(got)}
    return out


def in_process(args, model_scorers, index_of, queries, n_users, n_items, lo, qual) -> list[dict]:
    """Timed rows of every path x precision x batch size, without Triton."""
    rng = np.random.default_rng(args.seed)
    rows = []
    for batch in args.batch_sizes:
        count = args.requests if batch == 1 else max(args.user_budget // batch, 5)
        batches = [rng.integers(RESERVED, n_users, batch) for _ in range(count)]
        for precision, scorer in model_scorers.items():
            secs = timed(partial(exact, scorer, k=args.k), batches)
            q = qual[("exact", precision)]
            rows.append(row("in-process", "exact", precision, batch, secs, n_items, q))
            for (spec, index), n in itertools.product(index_of.items(), args.ann_candidates):
                fn = partial(
                    two_stage, scorer, index, queries, n=n, k=args.k, lo=lo, ef=args.ef_search
                )
                q = qual[(spec, n, precision)]
                path = f"ann {spec} n={n}"
                rows.append(row("in-process", path, precision, batch, timed(fn, batches), n, q))
    return rows


# -- the real server -----------------------------------------------------------------------


def _reload(conn, model: str, params: dict[str, str]) -> None:
    import json

    config = conn.get_model_config(model)
    for key, value in params.items():
        config["parameters"][key] = {"string_value": str(value)}
    conn.load_model(model, config=json.dumps(config))


def _infer(conn, users: np.ndarray, k: int) -> None:
    import tritonclient.http as http

    tensors = []
    for name, array in ((names.INPUT_RAW_USER, users), (names.INPUT_K, np.full_like(users, k))):
        tensors.append(http.InferInput(name, list(array.shape), "INT64"))
        tensors[-1].set_data_from_numpy(array)
    conn.infer(names.MODEL_RECOMMEND, tensors)


def triton_rows(args, n_items: int, qual: dict) -> list[dict]:
    """``recommend`` on a real tritonserver over HTTP, one client: exact fp32 / bf16 and the
    two-stage path (HNSW32, the largest --ann-candidates), each batch size."""
    import tritonclient.http as http

    from ncf.serving.repository import latest_version
    from ncf.serving.server import TritonServer

    model_dir = args.repo / names.MODEL_RECOMMEND
    with np.load(model_dir / str(latest_version(model_dir)) / names.ARTIFACT_VOCAB) as z:
        raw_users = z["user_raw"]
    n = max(args.ann_candidates)
    variants = [
        ("exact", "fp32", {"candidates": "exact"}),
        ("exact", "bf16", {"candidates": "exact"}),
        (f"ann HNSW32 n={n}", "bf16", {"candidates": "ann", "ann_candidates": n}),
    ]
    rng, rows = np.random.default_rng(args.seed + 1), []
    models = [names.MODEL_CATALOGUE, names.MODEL_RECOMMEND]
    with TritonServer(args.repo, models=models) as server:
        conn = http.InferenceServerClient(server.http_url, network_timeout=900.0)
        try:
            for path, precision, params in variants:
                threads = {"precision": precision, "num_threads": args.threads}
                _reload(conn, names.MODEL_CATALOGUE, threads)
                _reload(conn, names.MODEL_RECOMMEND, {**params, "ann_index": "HNSW32"})
                for batch in args.batch_sizes:
                    count = args.requests if batch == 1 else max(args.user_budget // batch, 5)
                    batches = [rng.choice(raw_users, (batch, 1)) for _ in range(count)]
                    secs = timed(lambda b: _infer(conn, b, args.k), batches)
                    key = ("exact", precision) if path == "exact" else ("HNSW32", n, precision)
                    scored = n_items if path == "exact" else n
                    rows.append(row("triton http", path, precision, batch, secs, scored, qual[key]))
        finally:
            conn.close()
    return rows


def run(args: RecommendBench) -> int:
    if args.make_checkpoint is not None:
        print(f"wrote {make_checkpoint(args.make_checkpoint, args.data, args.seed)}")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    model, lo, hi, source = build_model(args)
    model_scorers = scorers(model, lo, hi)
    vectors = gmf_tables(model, {"item_id_range": (lo, hi)})
    queries = vectors["users"]
    t0 = time.perf_counter()
    index_of = {spec: retrieval.build_index(vectors["items"], spec) for spec in args.ann_index}
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(args.seed + 2)
    users = rng.integers(RESERVED, model.cfg.num_users, args.quality_users)
    qual = quality(
        model_scorers, index_of, queries, users, args.k, lo, args.ann_candidates, args.ef_search
    )
    n_users = model.cfg.num_users
    rows = in_process(args, model_scorers, index_of, queries, n_users, hi - lo, lo, qual)
    if args.repo is not None:
        rows += triton_rows(args, hi - lo, qual)
    extra = {
        "model": source,
        "num_users": n_users,
        "catalogue": hi - lo,
        "k": args.k,
        "torch_threads": torch.get_num_threads(),
        "cpu_bf16": torch.backends.mkldnn.is_available() and _cpu_flag("avx512_bf16"),
        "faiss_build_s": round(build_s, 3),
        "quality_users": args.quality_users,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),  # > cores: timings are contended
    }
    title = f"Top-{args.k} recommendations, {hi - lo:,} items, {n_users:,} users ({source})"
    return Results(args.name, rows, COLUMNS, title, args.results_dir, extra)


def _cpu_flag(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(ln.startswith("flags") and flag in ln.split() for ln in f)
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
