"""The ETL pipeline: read -> filter -> fit -> transform -> split -> negatives -> write.

Everything that can reject the input (reading, validation, filtering, the feasibility of the
requested negatives) runs before anything is written; the output is then built in a temporary
directory beside ``--out`` and renamed into place (``ncf.core.atomic.atomic_dir``), so an interrupted
run leaves no output directory (or the previous complete one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ncf.core.atomic import atomic_dir, check_replaceable, clean_stale, write_json
from ncf.core.config import DEFAULT_SEED, Config, flag, flag_name, setting, write_config
from ncf.core.digest import sha256_file
from ncf.core.names import CONFIG_FILE, METADATA_FILE, WORKFLOW_DIR
from ncf.workflows import metadata as md
from ncf.workflows.backend import dense_codes
from ncf.workflows.encoding import Encoding, sorted_unique_encoding
from ncf.workflows.io import read_ratings
from ncf.workflows.negatives import check_feasible, sample_negatives
from ncf.workflows.output import Outputs, write_outputs
from ncf.workflows.split import hold_out_latest, latest_of_duplicates, min_count_mask

ENGINES = ("nvtabular", "pandas")
StageFn = Callable[[str], AbstractContextManager[Any]]


SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
ETL_EPILOG = """rules: duplicate (user, item) pairs keep their latest rating; users with fewer than
--min-ratings interactions are dropped (and, for --holdout valid,test, users with fewer than 3);
each user's latest interaction is the test item, and with --holdout valid,test the one before it
the valid item (ties on timestamp: --ties); negatives are --eval-negatives distinct items per user
and held-out split, uniform over the items the user never rated, never a positive.

output in OUT: train/ test/ negatives/ (and valid/ valid_negatives/) (parquet, int64 user_id,
item_id), workflow/ (the saved NVTabular Workflow; --engine pandas writes vocab/ instead),
metadata.json and config.json (the resolved `ncf etl` config: `ncf etl --config OUT/config.json`
rebuilds it). OUT is written to a temporary directory and renamed into place. Rerunning with the
same input and options reuses OUT; --force rebuilds it. OUT is replaced only if it is an
output of `ncf etl` (its marker .ncf-output.json, or a metadata.json it wrote) or an empty folder,
and never when it holds --input. Protocol: docs/PROTOCOL.md.

a running Dask cluster: --scheduler tcp://HOST:8786 (or DASK_SCHEDULER_ADDRESS) fits the Workflow on
its workers (`dask worker`; `dask cuda worker` when this host has a GPU) instead of in this
process; OUT must then be on a filesystem every worker mounts at the same path. The output is the
same as without it."""


@dataclasses.dataclass
class EtlConfig(Config):
    """NVTabular ETL: ids, leave-one-out split, exact eval negatives (`ncf etl`)."""

    EPILOG: ClassVar[str | None] = ETL_EPILOG

    input: Path | None = setting(
        None,
        help="ML-20m ratings.csv (header userId,movieId,rating,timestamp) or ML-1M ratings.dat "
        "(required)",
    )
    out: Path | None = setting(None, help="output directory (written atomically; required)")
    eval_negatives: int = setting(
        100, help="evaluation negatives per held-out user (100 DLE, 999 MLPerf)"
    )
    min_ratings: int = setting(20, help="drop users with fewer interactions after de-duplication")
    workers: int = setting(
        1, help="run the Workflow on a local Dask cluster of N workers (1: no cluster)"
    )
    seed: int = setting(DEFAULT_SEED, help="seed of the negative sampler")
    engine: Literal["nvtabular", "pandas"] = setting(
        "nvtabular",
        help="nvtabular: Categorify Workflow on cuDF/pandas; pandas: fallback for hosts without "
        "Merlin (sorted-unique ids, no workflow/)",
    )
    force: bool = flag(False, help="rebuild OUT even if it can be reused")
    scheduler: str | None = setting(
        None,
        metavar="ADDRESS",
        help="fit on the running Dask cluster of this scheduler (e.g. tcp://node0:8786) instead "
        f"of in this process; unset: ${SCHEDULER_ENV} when set (--engine nvtabular, no --workers)",
    )
    holdout: Literal["valid,test", "test"] = setting(
        "valid,test",
        help="held-out interactions per user: valid,test (latest -> test/, the one before -> "
        "valid/, for model selection) or test (DLE's layout, ML-20m parity)",
    )
    ties: Literal["item-id", "file-order"] = setting(
        "item-id",
        help="which same-second interaction is the latest: item-id (larger movieId) or "
        "file-order (later line of the input file)",
    )

    def check(self) -> None:
        """Raise ValueError for option values that cannot work."""
        for name in ("input", "out"):
            if getattr(self, name) is None:
                raise ValueError(f"--{name}: required (see `ncf etl --help`)")
        if self.engine not in ENGINES:
            raise ValueError(f"--engine must be one of {ENGINES}, got {self.engine!r}")
        if self.holdout not in md.HOLDOUTS or self.ties not in md.TIES:
            raise ValueError(
                f"--holdout must be one of {md.HOLDOUTS} and --ties one of {md.TIES}, got "
                f"{self.holdout!r} and {self.ties!r}"
            )
        for name in ("eval_negatives", "min_ratings", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{flag_name(name)} must be >= 1, got {getattr(self, name)}")
        if self.engine == "nvtabular" and find_spec("nvtabular") is None:
            raise ValueError(
                "--engine nvtabular needs NVTabular (the Merlin pins of pyproject.toml, or the NGC "
                "Merlin container); on hosts without it use --engine pandas"
            )
        if self.workers > 1 and self.engine != "nvtabular":
            raise ValueError(
                "--workers > 1 runs the NVTabular Workflow on Dask: use --engine nvtabular"
            )
        if self.scheduler and self.engine != "nvtabular":
            raise ValueError(
                f"--scheduler {self.scheduler} runs the NVTabular Workflow on a Dask cluster: "
                "use --engine nvtabular (the pandas engine runs in this process only)"
            )
        if self.scheduler and self.workers > 1:
            raise ValueError(
                f"--workers {self.workers} starts a local Dask cluster and --scheduler "
                f"{self.scheduler} uses a running one: pass only one of them"
            )

    def fingerprint_options(self) -> dict[str, Any]:
        """The settings under the names the reuse fingerprint has always used
        (``md.OUTPUT_OPTIONS``: the evaluation negatives are ``negatives`` there)."""
        values = dataclasses.asdict(self)
        values["negatives"] = values.pop("eval_negatives")
        return values


@dataclasses.dataclass
class Kept:
    """Ratings left after de-duplication and the min-ratings filter (raw ids, host or device)."""

    user: Any  # int32 [n]
    item: Any  # int32 [n]
    time: Any  # int64 [n]
    users: Any  # distinct raw user ids, ascending [n_users]
    items: Any  # distinct raw item ids, ascending [n_items]
    dropped: dict[str, int]
    dropped_users: dict[str, int]
    row: Any = None  # int64 [n] 0-based data line in the input file (--ties file-order), or None


def log(message: str) -> None:
    print(f"ncf etl: {message}", file=sys.stderr, flush=True)


def run_etl(opts: EtlConfig, stage: StageFn | None = None) -> dict[str, Any]:
    """Run the ETL; return the metadata written to ``out/metadata.json`` (or the reused one).

    Parameters
    ----------
    opts
        Options.
    stage
        Optional ``stage(name)`` context-manager factory wrapped around each stage (the benchmark
        passes one that samples peak RSS).
    """
    opts.check()
    timings: dict[str, float] = {}
    timed = _timer(timings, stage)
    reused = _reuse(opts)
    if reused is not None:
        return reused
    if opts.scheduler:
        from ncf.workflows import workflow as wfmod

        wfmod.connect(
            opts.scheduler
        ).close()  # an unreachable cluster fails now, not after the read
    with ThreadPoolExecutor(2) as pool:
        # Overlap with the read: hashing the input (GIL released) and NVTabular's 3 s import.
        sha = pool.submit(sha256_file, opts.input) if opts.input.is_file() else None
        if opts.engine == "nvtabular":
            pool.submit(_import_workflow_module)
        with timed("read"):
            ratings = read_ratings(opts.input)
        source = {
            "path": str(opts.input.resolve()),
            "rows": ratings.rows,
            "format": ratings.format,
            "bytes": opts.input.stat().st_size,
        }
        with timed("filter"):
            kept = filter_ratings(
                ratings,
                opts.min_ratings,
                opts.eval_negatives,
                opts.holdout,
                opts.ties == "file-order",
            )
        del ratings
        source["sha256"] = sha.result()
    clean_stale(opts.out)
    replace = opts.force or _is_empty_dir(opts.out)
    with atomic_dir(opts.out, replace, "etl", (opts.input,), md.is_etl_output) as tmp:
        meta = _build(opts, kept, tmp, timed, source)
        meta["timings_s"] = timings
        write_json(tmp / METADATA_FILE, meta)
        write_config(tmp / CONFIG_FILE, opts, "etl")
    _summary(opts, meta)
    return meta


def _import_workflow_module() -> None:
    from ncf.workflows import workflow as wfmod

    wfmod.import_nvtabular()


def filter_ratings(
    ratings: Any, min_ratings: int, negatives: int, holdout: str = "test", keep_rows: bool = False
) -> Kept:
    """Drop duplicate pairs, then users below ``min_ratings``, then users with too few
    interactions for ``holdout`` (:func:`ncf.workflows.metadata.holdout_minimum`); check the negatives
    can be drawn. ``keep_rows`` carries each rating's line number (``Kept.row``)."""
    cols = {"user": ratings.user, "item": ratings.item, "time": ratings.time}
    if keep_rows:
        # read_ratings returns the rows of the file in order (its Arrow blocks are concatenated in
        # file order), so the position is the global line number; the masks below keep it.
        cols["row"] = np.arange(ratings.rows, dtype=np.int64)
    keep = latest_of_duplicates(cols["user"], cols["item"], cols["time"])
    n_dup = int(keep.size - keep.sum())
    cols = _take(cols, keep, n_dup)
    keep, small_users = min_count_mask(cols["user"], min_ratings)
    n_small = int(keep.size - keep.sum())
    cols = _take(cols, keep, n_small)
    need = md.holdout_minimum(holdout)
    few_rows, few_users = 0, 0
    if need > min_ratings:
        keep, few_users = min_count_mask(cols["user"], need)
        few_rows = int(keep.size - keep.sum())
        cols = _take(cols, keep, few_rows)
    if cols["user"].size == 0:
        fix = "lower --min-ratings"
        if need > min_ratings:
            fix = f"--holdout {holdout} needs {need} per user (train, valid, test); try --holdout test"
        raise ValueError(
            f"{ratings.path}: no user has >= {max(need, min_ratings)} ratings "
            f"({small_users + few_users} users dropped); {fix}"
        )
    codes, users = dense_codes(cols["user"])
    _, items = dense_codes(cols["item"])
    check_feasible(np.bincount(codes, minlength=users.size), int(items.size), negatives, users)
    return Kept(
        **cols,
        users=users,
        items=items,
        dropped={
            "duplicate_pairs": n_dup,
            "users_below_min_ratings": n_small,
            "users_below_holdout_minimum": few_rows,
        },
        dropped_users={"below_min_ratings": small_users, "below_holdout_minimum": few_users},
    )


def _take(cols: dict[str, Any], keep: Any, n_dropped: int) -> dict[str, Any]:
    """The rows of ``cols`` where ``keep`` (the same arrays when nothing is dropped)."""
    return {k: v[keep] for k, v in cols.items()} if n_dropped else cols


def _build(opts: EtlConfig, kept: Kept, tmp: Path, timed: StageFn, source: dict) -> dict:
    """Fit, transform, split, sample and write into ``tmp``; return the metadata."""
    workflow, backend, workers = None, "pandas", opts.workers
    with timed("fit"):
        if opts.engine == "nvtabular":
            from ncf.workflows import workflow as wfmod

            if wfmod.gpu_available():
                kept, backend = _to_device(kept), "cudf"
            with wfmod.dask_client(opts.workers, backend == "cudf", opts.scheduler) as client:
                workers = wfmod.cluster_workers(client)
                workflow = wfmod.fit_workflow(kept.user, kept.item, tmp / ".fit", client)
    with timed("transform"):
        if workflow is not None:
            encoding = wfmod.workflow_encoding(workflow, kept.users, kept.items)
        else:
            encoding = sorted_unique_encoding(kept.users, kept.items)
        u_idx, i_idx = encoding.user.index(kept.user), encoding.item.index(kept.item)
    with timed("split"):
        tie = kept.row if opts.ties == "file-order" else kept.item
        held = hold_out_latest(
            u_idx, tie, kept.time, encoding.user.size, len(opts.holdout.split(","))
        )
    with timed("negatives"):
        # One draw per held-out split, each over every positive (train, valid and test).
        negs = [
            sample_negatives(
                u_idx, i_idx, encoding.user.size, encoding.item.size, opts.eval_negatives, seed
            )
            for seed in negative_seeds(opts.seed, len(held))
        ]
    with timed("write"):
        outputs = Outputs(u_idx, i_idx, held[0], *negs[0], encoding)
        if len(held) > 1:
            outputs.valid, (outputs.valid_neg_user, outputs.valid_neg_item) = held[1], negs[1]
        counts = write_outputs(tmp, outputs)
        vocab = _save_vocab(tmp, workflow, encoding)
    return _metadata(opts, kept, encoding, counts, vocab, source, (backend, workers))


def negative_seeds(seed: int, n_held: int) -> list[int]:
    """Seeds of the negative draws: ``seed`` for test (as ``--holdout test`` draws), then one
    derived from ``seed`` by numpy's SeedSequence for valid (an independent stream)."""
    derived = np.random.SeedSequence([seed, 1]).generate_state(1, np.uint32)[0]
    return [seed, int(derived)][:n_held]


def _to_device(kept: Kept) -> Kept:
    import cupy

    names = ("user", "item", "time", "users", "items") + (("row",) if kept.row is not None else ())
    fields = {f: cupy.asarray(getattr(kept, f)) for f in names}
    return dataclasses.replace(kept, **fields)


def _save_vocab(tmp: Path, workflow: Any, encoding: Encoding) -> dict[str, Any]:
    from ncf.core.names import RAW_ITEM, RAW_USER
    from ncf.workflows.output import write_vocab

    if workflow is not None:
        from ncf.workflows import workflow as wfmod

        files = wfmod.save_workflow(workflow, tmp / WORKFLOW_DIR)
        wfmod.remove_fit_dir(tmp / ".fit")
    else:
        files = write_vocab(tmp, encoding)
    columns = {"user": RAW_USER, "item": RAW_ITEM}
    first = {"user": encoding.user.lo, "item": encoding.item.lo}
    return md.vocab_metadata(files, tmp, columns, first)


def _metadata(opts, kept, encoding, counts, vocab, source, ran_on) -> dict[str, Any]:
    options = opts.fingerprint_options()
    backend, workers = ran_on
    return {
        "format": md.FORMAT,
        "num_users": encoding.user.cardinality,
        "num_items": encoding.item.cardinality,
        "user_id_range": [encoding.user.lo, encoding.user.hi],
        "item_id_range": [encoding.item.lo, encoding.item.hi],
        "n_users": encoding.user.size,
        "n_items": encoding.item.size,
        **counts,
        "negatives_per_user": opts.eval_negatives,
        "holdout": opts.holdout,
        "ties": opts.ties,
        "dropped": kept.dropped,
        "dropped_users": kept.dropped_users,
        "min_ratings": opts.min_ratings,
        "holdout_min_interactions": md.holdout_minimum(opts.holdout),
        "seed": opts.seed,
        "engine": opts.engine,
        "backend": backend,
        # Where the fit ran (Dask workers; the external scheduler, if any). Neither changes the
        # output, so neither is in the fingerprint.
        "workers": workers,
        "scheduler": opts.scheduler,
        "input": source,
        "versions": md.package_versions(),
        **vocab,
        "rules": {
            "order": md.FILTER_ORDER,
            "dedup": md.DEDUP_RULE,
            "split": md.split_rule(opts.holdout, opts.ties),
            "negatives": md.VALID_NEGATIVE_RULE if "valid" in opts.holdout else md.NEGATIVE_RULE,
            "fit": md.FIT_RULE,
        },
        "fingerprint": md.fingerprint(options, source["sha256"]),
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _reuse(opts: EtlConfig) -> dict[str, Any] | None:
    """The existing metadata if ``out`` can be reused; raise if it exists but differs (no --force),
    or is not an ETL output at all (``--force`` or not: never replace what the ETL did not write)."""
    if not opts.out.exists() or _is_empty_dir(opts.out):
        return None
    check_replaceable(opts.out, "etl", (opts.input,), md.is_etl_output)
    if not opts.input.is_file():
        return None
    wanted = md.fingerprint(opts.fingerprint_options(), sha256_file(opts.input))
    existing = md.read_metadata(opts.out)
    differences = md.reuse_differences(existing, wanted)
    if not differences and not opts.force:
        log(f"reusing {opts.out}: same input sha256 and options (pass --force to rebuild)")
        return existing
    if not opts.force:
        raise FileExistsError(
            f"{opts.out} exists but was not made from this input and options "
            f"({'; '.join(differences)}); pass --force to rebuild it or choose another --out"
        )
    return None


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _timer(timings: dict[str, float], outer: StageFn | None) -> StageFn:
    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        with outer(name) if outer is not None else contextlib.nullcontext():
            yield
        timings[name] = round(time.perf_counter() - t0, 3)

    return timed


def _summary(opts: EtlConfig, meta: dict[str, Any]) -> None:
    d, du = meta["dropped"], meta["dropped_users"]
    few = ""
    if du["below_holdout_minimum"]:
        few = (
            f", and {d['users_below_holdout_minimum']:,} rows of {du['below_holdout_minimum']:,} "
            f"users with < {meta['holdout_min_interactions']} (--holdout {opts.holdout})"
        )
    log(
        f"dropped {d['duplicate_pairs']:,} duplicate (user, item) rows and "
        f"{d['users_below_min_ratings']:,} rows of {du['below_min_ratings']:,} "
        f"users with < {opts.min_ratings} ratings{few}"
    )
    total = sum(meta["timings_s"].values())
    where = f" on {meta['workers']} Dask workers of {opts.scheduler}" if opts.scheduler else ""
    valid = f"valid {meta['valid_rows']:,}, " if "valid_rows" in meta else ""
    print(
        f"ncf etl: {meta['input']['rows']:,} ratings -> {meta['n_users']:,} users, "
        f"{meta['n_items']:,} items; train {meta['train_rows']:,}, {valid}test {meta['test_rows']:,}, "
        f"negatives {meta['negative_rows']:,} ({opts.eval_negatives}/user); {opts.out} "
        f"[{meta['engine']}/{meta['backend']}{where}, {total:.1f} s]"
    )
