"""Cold start from history: users the model never saw, given their first N ratings.

    python -m ncf.bench.cold_start                  # ml-latest-small
    python -m ncf.bench.cold_start --input data/ml100k/ratings.csv

Commands run: ``ncf etl --cold-users F`` (a seeded share F of the users set apart with all their
ratings), ``ncf train --preset P`` on the rest, ``ncf export`` into a fresh repository, then the
real tritonserver on it. For each cold user with at least N + 1 ratings and each N of ``--history``:
the history is the user's first N ratings by time and the target the next one; ``recommend`` is
asked for the top 10 (a) with ``history`` (the model scores the catalogue with the user's folded-in
vectors) and (b) without it (the popularity list), both with the history excluded. HR@10 is the
share of users whose target is in that top 10, over the whole catalogue (no sampled negatives).
A target the training data never saw counts as a miss for both. Latency: one user per request,
one client, sequential, the history of ``--latency-history`` ratings against none.

The cold start's settings are ``recommend``'s config.pbtxt defaults (foldin_*): nothing is chosen
on these users.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.entry import Results
from ncf.bench.train_preset import train
from ncf.core import names
from ncf.core.config import DEFAULT_SEED, Config, setting
from ncf.models.data import read_metadata
from ncf.workflows.vocab_from import read_encoding

COLUMNS = ("answer", "history", "users", "hr@10", "target_unknown", "lat_p50_ms", "lat_p99_ms")
# What `--candidates` rows say (their figures come from the ETL the bench made, in process).
CANDIDATE = "in process: history {}"


@dataclass
class ColdStartBench(Config):
    """HR@10 and latency of the cold start from history against the popularity list."""

    input: Path = setting(Path("data/ml-latest-small/ratings.csv"), help="MovieLens ratings.csv")
    cold_users: float = setting(0.1, help="`ncf etl --cold-users`: share of users set apart")
    preset: str = setting("small", help="`ncf train --preset` of the model")
    history: list[int] = setting(default_factory=lambda: [1, 3, 5, 10], help="history lengths N")
    candidates: list[str] = setting(
        default_factory=list,
        metavar="STEPS,LR,L2,NEGATIVES",
        help="also score these fold-in settings in this process (the exported foldin.pt, no "
        "server): how the config.pbtxt defaults were chosen, on other data sets than the one "
        "reported",
    )
    latency_history: int = setting(5, help="history length of the latency rows")
    latency_requests: int = setting(200, help="timed requests per latency row")
    threads: int = setting(0, help="`ncf train --threads` (0: all cores)")
    work: Path = setting(Path("work/bench-cold-start"), help="ETL output, run and repository")
    results_dir: Path = setting(RESULTS_DIR, help="where the results go")

    def check(self) -> None:
        """Raise ValueError naming the flag of an invalid value."""
        if not 0 < self.cold_users < 1 or not self.history or min(self.history) < 1:
            raise ValueError(
                f"--cold-users {self.cold_users} / --history {self.history}: need 0 < F < 1 and "
                "history lengths >= 1"
            )
        for text in self.candidates:
            parse_candidate(text)


def parse_candidate(text: str) -> list[float]:
    """``STEPS,LR,L2,NEGATIVES`` as numbers; ValueError naming the bad part."""
    want = "want STEPS,LR,L2,NEGATIVES, e.g. 5,0.05,1e-1,4"
    parts = text.split(",")
    if len(parts) != 4:
        raise ValueError(f"--candidates {text!r}: {len(parts)} parts, {want}")
    numbers = []
    for part in parts:
        try:
            numbers.append(float(part))
        except ValueError:
            raise ValueError(f"--candidates {text!r}: {part!r} is not a number; {want}") from None
    steps, lr, l2, negatives = numbers
    if not (steps.is_integer() and negatives.is_integer()) or min(steps, l2, negatives) < 0:
        raise ValueError(f"--candidates {text!r}: need whole STEPS, NEGATIVES >= 0, L2 >= 0")
    if lr <= 0:
        raise ValueError(f"--candidates {text!r}: LR {parts[1]!r} must be > 0")
    return numbers


CONFIG = ColdStartBench


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ncf.cli", *args], check=True)


def prepare(cfg: ColdStartBench) -> tuple[Path, Path]:
    """ETL with cold users, the model on the rest, its export: (ETL output, repository)."""
    etl, repo, run = cfg.work / "etl", cfg.work / "repo", cfg.work / "train"
    _cli("etl", "--input", str(cfg.input), "--out", str(etl), "--force",
         "--cold-users", str(cfg.cold_users))  # fmt: skip
    threads = ["--threads", str(cfg.threads)] if cfg.threads else []
    train(etl, cfg.preset, DEFAULT_SEED, run, [*threads, "--device", "cpu", "--force"])
    if repo.exists():
        shutil.rmtree(repo)  # this bench's own repository, rebuilt each run
    _cli("export", "--checkpoint", str(run / "best.pt"), "--data", str(etl), "--repo", str(repo))
    return etl, repo


def cold_histories(etl: Path) -> dict[int, np.ndarray]:
    """Raw userId -> the user's raw movieIds in time order (``cold_users/``)."""
    table = pq.read_table(etl / names.COLD_USERS_DIR).to_pandas()
    table = table.sort_values([names.RAW_USER, names.RAW_TIME, names.RAW_ITEM], kind="stable")
    return {int(u): g[names.RAW_ITEM].to_numpy() for u, g in table.groupby(names.RAW_USER)}


def _ask(conn, user: int, history: np.ndarray | None, exclude: np.ndarray) -> np.ndarray:
    """``recommend``'s top 10 raw movieIds for one user."""
    import tritonclient.http as http

    arrays = {
        names.INPUT_RAW_USER: np.array([[user]], dtype=np.int64),
        names.INPUT_K: np.array([[10]], dtype=np.int64),
        names.INPUT_EXCLUDE: exclude.reshape(1, -1).astype(np.int64),
    }
    if history is not None:
        arrays[names.INPUT_HISTORY] = history.reshape(1, -1).astype(np.int64)
    inputs = []
    for name, array in arrays.items():
        inputs.append(http.InferInput(name, list(array.shape), "INT64"))
        inputs[-1].set_data_from_numpy(array)
    return conn.infer(names.MODEL_RECOMMEND, inputs).as_numpy(names.OUTPUT_RAW_ITEMS)[0]


def hit_rows(conn, histories: dict, known_items: set, lengths: list[int]) -> list[dict]:
    """HR@10 of both answers for each history length."""
    rows = []
    for n in lengths:
        users = {u: h for u, h in histories.items() if len(h) > n}
        hits = {"history": 0, "popularity": 0}
        for user, items in users.items():
            seen, target = items[:n], items[n]
            for answer, history in (("history", seen), ("popularity", None)):
                hits[answer] += int(target in _ask(conn, user, history, seen))
        unknown = sum(h[n] not in known_items for h in users.values())
        for answer, hit in hits.items():
            rows.append({"answer": answer, "history": n, "users": len(users),
                         "hr@10": round(hit / max(len(users), 1), 4),
                         "target_unknown": unknown})  # fmt: skip
    return rows


def latency_rows(conn, histories: dict, known: np.ndarray, n: int, requests: int) -> list[dict]:
    """p50/p99 ms of one-user requests: a cold user with a history of ``n`` ratings, the same
    without it (popularity), and a trained user (``known``: raw userIds; the model's own row)."""
    cold = [(u, h[:n]) for u, h in histories.items() if len(h) >= n]
    asks = {
        "history": lambda i: _ask(conn, cold[i % len(cold)][0], cold[i % len(cold)][1],
                                  cold[i % len(cold)][1]),
        "popularity": lambda i: _ask(conn, cold[i % len(cold)][0], None, cold[i % len(cold)][1]),
        "trained user": lambda i: _ask(conn, int(known[i % len(known)]), None, np.full(1, -1)),
    }  # fmt: skip
    rows = []
    for answer, ask in asks.items():
        times = []
        for i in range(requests + 5):
            t0 = time.perf_counter()
            ask(i)
            times.append((time.perf_counter() - t0) * 1000)
        times = np.array(times[5:])  # the first requests warm the stub up
        rows.append({"answer": answer, "history": n if answer == "history" else 0,
                     "users": len(known) if answer == "trained user" else len(cold),
                     "lat_p50_ms": round(float(np.median(times)), 2),
                     "lat_p99_ms": round(float(np.percentile(times, 99)), 2)})  # fmt: skip
    return rows


def candidate_rows(
    repo: Path, etl: Path, histories: dict, lengths: list[int], settings: list[list[float]]
) -> list[dict]:
    """HR@10 of each candidate (steps, lr, l2, negatives) with the exported ``foldin.pt`` in
    this process (the served module, without the server), and of the popularity list."""
    import torch

    folder = repo / names.MODEL_RECOMMEND / "1"
    module = torch.jit.load(str(folder / names.ARTIFACT_FOLDIN)).eval()
    meta, _ = read_metadata(etl)
    raw = read_encoding(etl, meta).item.raw  # raw movieId of model id lo + row
    lo = meta["item_id_range"][0]
    code = {int(r): lo + i for i, r in enumerate(raw)}
    with np.load(folder / names.ARTIFACT_POPULARITY) as z:
        popular = z["items"] - lo  # catalogue rows, most popular first
    rows = []
    for n in lengths:
        users = [h for h in histories.values() if len(h) > n]
        cases = []
        for items in users:
            seen = np.array([code[int(i)] - lo for i in items[:n] if int(i) in code], np.int64)
            target = code.get(int(items[n]), -1) - lo if int(items[n]) in code else -1
            cases.append((seen, target))
        pop_hits = sum(t in popular[~np.isin(popular, s)][:10] for s, t in cases)
        rows.append({"answer": CANDIDATE.format("none (popularity)"), "history": n,
                     "users": len(cases),
                     "hr@10": round(pop_hits / len(cases), 4)})  # fmt: skip
        for steps, lr, l2, negatives in settings:
            hits = 0
            for seen, target in cases:
                if seen.size == 0:  # no known item: the popularity list
                    hits += target in popular[:10]
                    continue
                scores = module(torch.from_numpy(seen + lo), int(steps), lr, l2, int(negatives))
                scores[torch.from_numpy(seen)] = -1.0
                hits += target in torch.topk(scores, 10).indices.numpy()
            name = f"{int(steps)},{lr:g},{l2:g},{int(negatives)}"
            rows.append({"answer": CANDIDATE.format(name),
                         "history": n, "users": len(cases),
                         "hr@10": round(hits / len(cases), 4)})  # fmt: skip
    return rows


def run(cfg: ColdStartBench) -> Results:
    """Prepare, serve, ask; the table and JSON."""
    import tritonclient.http as http

    from ncf.serving.server import TritonServer

    etl, repo = prepare(cfg)
    histories = cold_histories(etl)
    meta, _ = read_metadata(etl)
    encoding = read_encoding(etl, meta)
    with TritonServer(repo) as server:
        conn = http.InferenceServerClient(server.http_url)
        rows = hit_rows(conn, histories, set(encoding.item.raw.tolist()), cfg.history)
        trained = encoding.user.raw[:64]
        rows += latency_rows(conn, histories, trained, cfg.latency_history, cfg.latency_requests)
        conn.close()
    settings = [parse_candidate(text) for text in cfg.candidates]
    if settings:
        rows += candidate_rows(repo, etl, histories, cfg.history, settings)
    for r in rows:
        print(r)
    extra = {"protocol": "full-catalogue, history excluded; foldin settings: config.pbtxt defaults",
             "cold_users": meta["cold_users"], "etl": str(etl)}  # fmt: skip
    title = (f"Cold start from history: users set apart by `ncf etl --cold-users "
             f"{cfg.cold_users:g}` ({cfg.input}, `--preset {cfg.preset}`), their first N ratings "
             "as `history`; HR@10 of the next one, over the whole catalogue")  # fmt: skip
    return Results("cold-start", rows, COLUMNS, title, cfg.results_dir, extra)


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
