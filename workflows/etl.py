"""The ETL pipeline: read -> prepare (per user) -> fit (Categorify) -> finish (per user) -> write.

Two paths give the same output (``ncf.workflows.partition`` holds the per-user steps both run):

- in memory (the input fits one partition: at most ``--partition-rows`` ratings): read the
  whole input, prepare, fit, finish, write; the fast path.
- partitioned (``ncf.workflows.partitioned``): the input in blocks, shuffled by user into
  partitions, each prepared and finished by its own task, in this process or on Dask workers;
  memory per process is bounded by the partition size.

The choice is printed. The output is built in a temporary directory beside ``--out`` and renamed
into place (``ncf.core.atomic.atomic_dir``), so a failed or interrupted run leaves no output
directory (or the previous complete one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar, Literal

from ncf.core import heap
from ncf.core.atomic import atomic_dir, check_replaceable, clean_stale, write_json
from ncf.core.config import DEFAULT_SEED, Config, flag, flag_name, setting, write_config
from ncf.core.digest import sha256_file
from ncf.core.names import COLD_USERS_DIR, CONFIG_FILE, METADATA_FILE, WORKFLOW_DIR
from ncf.workflows import metadata as md
from ncf.workflows import vocab_from as prior_vocab
from ncf.workflows.blocks import Block, estimate_rows, plan_blocks
from ncf.workflows.columns import ColumnMap, parse_columns
from ncf.workflows.encoding import Encoding, sorted_unique_encoding
from ncf.workflows.io import read_ratings
from ncf.workflows.output import COUNT_KEYS, write_cold, write_part
from ncf.workflows.parquet_input import parquet_files
from ncf.workflows.partition import Summary, finish, negative_seeds, prepare
from ncf.workflows.partitioned import default_partitions
from ncf.workflows.schema import write_schemas

ENGINES = ("nvtabular", "pandas")
DATASETS = tuple(COUNT_KEYS)  # the dataset folders an output may hold
# In memory, blocks below this come from the heap (a partition's arrays: up to 25M rows x 8 B).
IN_MEMORY_MMAP_THRESHOLD = 1 << 30
# Ratings per partition: about 100 bytes a rating at the peak of the per-user steps, so 25M keep a
# process near 2.5-3 GB and 200M ratings (8 partitions) within 8 GB on 2 workers
# (docs/ARCHITECTURE.md, 'Partitioned ETL'; bench/results/etl-scale.json).
PARTITION_ROWS = 25_000_000
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

input: ratings.csv (MovieLens header), ratings.dat (ML-1M), or parquet (a file or a folder of
them); other column names with --columns user=NAME,item=NAME,time=NAME.

partitions: input of at most --partition-rows ratings runs in memory; larger input is shuffled
by user into partitions of about that size (or --partitions N), each processed on its own, so a
process never holds more than one partition: in this process, on --workers N local Dask workers,
or on a running cluster: --scheduler tcp://HOST:8786 (or DASK_SCHEDULER_ADDRESS; `dask worker`,
`dask cuda worker` on GPU hosts), where --input and OUT must be on a filesystem every worker
mounts at the same path. The output is the same for every partitioning and cluster."""


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
    partitions: int = setting(
        0,
        help="partitions by user (0: as many as --partition-rows needs; 1: all in memory)",
    )
    partition_rows: int = setting(
        PARTITION_ROWS,
        help="ratings per partition when --partitions is 0; bounds the memory of each process "
        "(docs/ARCHITECTURE.md, 'Partitioned ETL')",
    )
    vocab_from: Path | None = setting(
        None,
        metavar="PREVIOUS_ETL",
        help="keep the model ids of this earlier `ncf etl` output and number new users and items "
        "after them (a retrain that warm-starts with `ncf train --init-from`)",
    )
    cold_users: float = setting(
        0.0,
        metavar="FRACTION",
        help="set apart this seeded share of the users (--seed): none of their ratings is "
        "trained on or evaluated; they go to OUT/cold_users/ (raw ids, by time) for measuring "
        "the cold start from history (ncf bench cold-start)",
    )
    columns: str | None = setting(
        None,
        metavar="user=NAME,item=NAME,time=NAME",
        help="the input's user, item and time columns when they are not MovieLens's "
        "userId, movieId, timestamp (CSV header or parquet schema)",
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
        parse_columns(self.columns)
        if not 0.0 <= self.cold_users < 1.0:
            raise ValueError(
                f"--cold-users {self.cold_users}: a share of the users in [0, 1), e.g. 0.1"
            )
        if self.partitions < 0:
            raise ValueError(f"--partitions must be >= 0 (0: automatic), got {self.partitions}")
        for name in ("eval_negatives", "min_ratings", "workers", "partition_rows"):
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
        (``md.OUTPUT_OPTIONS``: the evaluation negatives are ``negatives`` there), and the draw of
        the negatives (``md.NEGATIVE_DRAW``: outputs of an earlier draw are rebuilt, not reused)."""
        values = dataclasses.asdict(self)
        values["negatives"] = values.pop("eval_negatives")
        values["negative_draw"] = md.NEGATIVE_DRAW
        # The ids continue the previous output as it was: its metadata.json's hash.
        if self.vocab_from is not None:
            values["vocab_from"] = prior_vocab.previous_sha256(self.vocab_from)
        return values


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
    if opts.vocab_from is not None:  # before the input is read
        if opts.vocab_from.resolve() == opts.out.resolve():
            raise ValueError(
                f"--vocab-from {opts.vocab_from} is --out: the output it continues would be "
                "replaced; write the new output to another --out"
            )
        prior_vocab.check_previous(opts.vocab_from, opts.engine)
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
    columns = parse_columns(opts.columns)
    blocks = plan_blocks(opts.input, columns)
    rows, partitions = _partitions(opts, blocks)
    if partitions == 1:
        log(f"in memory: ~{rows:,} ratings, at most --partition-rows {opts.partition_rows:,}")
        meta = _in_memory(opts, columns, timed, timings)
    else:
        where = f"--scheduler {opts.scheduler}" if opts.scheduler else f"{opts.workers} worker(s)"
        log(f"partitioned by user: ~{rows:,} ratings in {partitions} partitions, on {where}")
        meta = _partitioned(opts, blocks, partitions, timed, timings)
    _summary(opts, meta)
    return meta


def _partitions(opts: EtlConfig, blocks: list[Block]) -> tuple[int, int]:
    """Estimated ratings of the input and the partitions to use (``--partitions``, or enough
    that none exceeds ``--partition-rows``)."""
    rows = estimate_rows(blocks)
    if opts.partitions:
        return rows, opts.partitions
    return rows, default_partitions(rows, opts.partition_rows)


def _in_memory(opts: EtlConfig, columns: ColumnMap, timed: StageFn, timings: dict) -> dict:
    """The whole input in this process (one partition): the fast path for data that fits."""
    # Its 100+ MB temporaries come and go by the dozen: reuse freed ones instead of faulting
    # fresh pages in for each; the heap is handed back when the run ends (in-process callers).
    heap.keep_freed_memory(IN_MEMORY_MMAP_THRESHOLD, keep_top=True)
    try:
        return _in_memory_run(opts, columns, timed, timings)
    finally:
        heap.release_freed_memory()


def _in_memory_run(opts: EtlConfig, columns: ColumnMap, timed: StageFn, timings: dict) -> dict:
    with ThreadPoolExecutor(2) as pool:
        # Overlap with the read: hashing the input (GIL released) and NVTabular's 3 s import.
        sha = pool.submit(input_sha256, opts.input)
        if opts.engine == "nvtabular":
            pool.submit(_import_workflow_module)
        with timed("read"):
            ratings = read_ratings(opts.input, columns)
        source = _source(opts, ratings.rows, ratings.format)
        cols, backend = ratings.columns(opts.ties == "file-order"), _backend(opts)
        del ratings
        if backend == "cudf":
            import cupy

            cols = {k: cupy.asarray(v) for k, v in cols.items()}
        with timed("prepare"):
            cold = (opts.cold_users, opts.seed)
            part = prepare(cols, opts.min_ratings, opts.holdout, opts.ties == "file-order", cold)
        del cols
        summary = Summary.of(part)
        summary.check(opts.input, opts.min_ratings, opts.holdout, opts.eval_negatives)
        source["sha256"] = sha.result()
    with _output(opts, timings) as (tmp, meta):
        workflow, encoding, workers = _fit(opts, tmp, timed, (part.user, part.item), summary)
        with timed("finish"):
            rows = finish(part, encoding, opts.eval_negatives, _seeds(opts))
        with timed("write"):
            counts = write_part(tmp, 0, rows)
            write_cold(tmp, 0, part.cold)
            write_schemas(tmp, list(rows), encoding)
            vocab = _save_vocab(tmp, workflow, encoding)
        meta.update(
            _metadata(opts, summary, encoding, counts, vocab, source, (backend, workers, 1))
        )
    return meta


def _partitioned(
    opts: EtlConfig, blocks: list[Block], partitions: int, timed: StageFn, timings: dict
) -> dict[str, Any]:
    """The input in partitions by user, each stage a set of tasks (``ncf.workflows.partitioned``)."""
    from ncf.workflows import partitioned as pt

    backend = _backend(opts)
    pool = ThreadPoolExecutor(1)
    sha = pool.submit(input_sha256, opts.input)  # beside the scatter (hashing releases the GIL)
    with _output(opts, timings) as (tmp, meta), _client(opts, backend) as client, pool:
        scratch = (tmp / pt.SCRATCH).resolve()
        scratch.mkdir()
        if client is not None:
            from ncf.workflows import workflow as wfmod

            wfmod.check_workers_see(client, scratch)
        job = pt.Job(
            out=str(tmp.resolve()),
            scratch=str(scratch),
            partitions=partitions,
            min_ratings=opts.min_ratings,
            holdout=opts.holdout,
            file_order=opts.ties == "file-order",
            negatives=opts.eval_negatives,
            seeds=tuple(_seeds(opts)),
            gpu=backend == "cudf",
            cold=(opts.cold_users, opts.seed),
        )
        with timed("read"):
            read = sum(pt.run_tasks(client, pt.scatter, blocks, job))
        source = _source(opts, read, blocks[0].fmt)
        with timed("prepare"):
            summary = Summary.merge(
                pt.run_tasks(client, pt.prepare_partition, range(partitions), job)
            )
        summary.check(opts.input, opts.min_ratings, opts.holdout, opts.eval_negatives)
        kept = pt.kept_files(scratch, partitions)
        workflow, encoding, workers = _fit(opts, tmp, timed, kept, summary, client)
        pt.save_encoding(scratch, encoding)
        with timed("finish"):
            parts = pt.run_tasks(client, pt.finish_partition, range(partitions), job)
        counts = {k: sum(c[k] for c in parts) for k in parts[0]}
        with timed("write"):
            write_schemas(tmp, [d for d in DATASETS if (tmp / d).is_dir()], encoding)
            vocab = _save_vocab(tmp, workflow, encoding)
            shutil.rmtree(scratch)
        source["sha256"] = sha.result()
        ran_on = (backend, workers, partitions)
        meta.update(_metadata(opts, summary, encoding, counts, vocab, source, ran_on))
    return meta


@contextlib.contextmanager
def _output(opts: EtlConfig, timings: dict) -> Iterator[tuple[Path, dict]]:
    """The output's temporary folder and the metadata to fill in; on success both are written
    with the config and the folder is renamed to ``--out`` (``ncf.core.atomic.atomic_dir``)."""
    clean_stale(opts.out)
    replace = opts.force or _is_empty_dir(opts.out)
    with atomic_dir(opts.out, replace, "etl", (opts.input,), md.is_etl_output) as tmp:
        meta: dict[str, Any] = {}
        yield tmp, meta
        meta["timings_s"] = timings
        write_json(tmp / METADATA_FILE, meta)
        write_config(tmp / CONFIG_FILE, opts, "etl")


@contextlib.contextmanager
def _client(opts: EtlConfig, backend: str) -> Iterator[Any]:
    """The Dask client of the run's cluster (None: tasks run in this process)."""
    if opts.workers <= 1 and not opts.scheduler:
        yield None
        return
    from ncf.workflows import workflow as wfmod

    with wfmod.dask_client(opts.workers, backend == "cudf", opts.scheduler) as client:
        yield client


def _backend(opts: EtlConfig) -> str:
    """``cudf`` when the NVTabular engine sees a GPU (the arrays then live on it), else pandas."""
    if opts.engine != "nvtabular":
        return "pandas"
    from ncf.workflows import workflow as wfmod

    return "cudf" if wfmod.gpu_available() else "pandas"


def _fit(opts, tmp, timed, kept, summary, client=None) -> tuple[Any, Encoding, int]:
    """The vocabularies of the kept ratings (``kept``: arrays, or the partitions' files):
    Categorify through the NVTabular Workflow, or the pandas engine's sorted-unique ids; with
    ``--vocab-from``, renumbered after the previous output's (``ncf.workflows.vocab_from``)."""
    workflow, encoding, workers = _fit_new(opts, tmp, timed, kept, summary, client)
    if opts.vocab_from is None:
        return workflow, encoding, workers
    with timed("vocab_from"):
        previous = prior_vocab.check_previous(opts.vocab_from, opts.engine)
        encoding = prior_vocab.extended_encoding(previous, encoding)
        if workflow is None:
            return None, encoding, workers
        from ncf.workflows import workflow as wfmod

        workflow = wfmod.vocab_workflow(encoding, tmp / ".fit" / "vocab-from")
        applied = wfmod.workflow_encoding(workflow, encoding.user.raw, encoding.item.raw)
        for kind in prior_vocab.KINDS:
            got, want = getattr(applied, kind), getattr(encoding, kind)
            same = got.lo == want.lo and got.cardinality == want.cardinality
            if not (same and bool((got.raw == want.raw).all())):
                raise RuntimeError(
                    f"--vocab-from: the Workflow numbers {kind}s unlike the vocabulary"
                )
    return workflow, encoding, workers


def _fit_new(opts, tmp, timed, kept, summary, client=None) -> tuple[Any, Encoding, int]:
    """The vocabularies this run's engine fits on the kept ratings alone."""
    with timed("fit"):
        if opts.engine != "nvtabular":
            return None, sorted_unique_encoding(summary.users, summary.items), 1
        from ncf.workflows import workflow as wfmod

        with contextlib.ExitStack() as stack:
            if client is None and (opts.workers > 1 or opts.scheduler):
                client = stack.enter_context(
                    wfmod.dask_client(opts.workers, wfmod.gpu_available(), opts.scheduler)
                )
            workers = wfmod.cluster_workers(client)
            workflow = wfmod.fit_workflow(kept, tmp / ".fit", client)
    with timed("transform"):
        return workflow, wfmod.workflow_encoding(workflow, summary.users, summary.items), workers


def _seeds(opts: EtlConfig) -> list[int]:
    return negative_seeds(opts.seed, len(opts.holdout.split(",")))


def _source(opts: EtlConfig, rows: int, fmt: str) -> dict[str, Any]:
    size = sum(f.stat().st_size for f in input_files(opts.input))
    return {"path": str(opts.input.resolve()), "rows": rows, "format": fmt, "bytes": size}


def input_files(path: Path) -> list[Path]:
    """The files of the input: itself, or a parquet folder's files."""
    return parquet_files(path) if path.is_dir() else [path]


def input_sha256(path: Path) -> str:
    """sha256 of the input file; of a folder, of each file's name and sha256 in turn."""
    if not path.is_dir():
        return sha256_file(path)
    lines = "".join(f"{f.name}\t{sha256_file(f)}\n" for f in parquet_files(path))
    return hashlib.sha256(lines.encode()).hexdigest()


def _import_workflow_module() -> None:
    from ncf.workflows import workflow as wfmod

    wfmod.import_nvtabular()


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
    backend, workers, partitions = ran_on
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
        # How the run was spread (partitions, Dask workers, the external scheduler, if any).
        # None changes the output, so none is in the fingerprint.
        "partitions": partitions,
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
        "vocab_from": None if opts.vocab_from is None else prior_vocab.provenance(opts.vocab_from),
        "cold_users": _cold_users(opts, kept),
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def _cold_users(opts: EtlConfig, kept: Summary) -> dict[str, Any] | None:
    """What ``--cold-users`` set apart (None without it)."""
    if opts.cold_users <= 0:
        return None
    return {"fraction": opts.cold_users, "seed": opts.seed, "dir": COLD_USERS_DIR,
            "rule": md.COLD_USERS_RULE, **kept.cold}  # fmt: skip


def _reuse(opts: EtlConfig) -> dict[str, Any] | None:
    """The existing metadata if ``out`` can be reused; raise if it exists but differs (no --force),
    or is not an ETL output at all (``--force`` or not: never replace what the ETL did not write)."""
    if not opts.out.exists() or _is_empty_dir(opts.out):
        return None
    check_replaceable(opts.out, "etl", (opts.input,), md.is_etl_output)
    if not (opts.input.is_file() or opts.input.is_dir()):
        return None
    wanted = md.fingerprint(opts.fingerprint_options(), input_sha256(opts.input))
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
