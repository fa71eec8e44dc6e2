"""The NVTabular Workflow of the ETL: Categorify of ``userId`` and ``movieId`` (pandas or cuDF).

``userId >> Categorify >> Rename(user_id)`` and ``movieId >> Categorify >> Rename(item_id)``:
the saved Workflow takes raw MovieLens ids and returns model ids under the names the model and
the Triton ensemble use, so serving maps raw ids exactly as training did.

Cost: the Workflow is *fitted* on every kept rating (so ids are Categorify's frequency order and
every test item has an id), but it is *applied* to the distinct ids only (a few hundred thousand
rows); the 20M ratings then get their ids by one gather through that table. That gives exactly
``workflow.transform(ratings)`` (a test checks it) at a fraction of the cost (on 20M ratings
here: 9 s -> under 0.5 s).

NVTabular is imported only by this module, and only when the ``nvtabular`` engine runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ncf.core.names import ITEM, RAW_ITEM, RAW_USER, USER
from ncf.workflows.backend import array_module, to_numpy
from ncf.workflows.encoding import Encoding, Vocabulary

PART_ROWS = 2_500_000  # rows per Dask partition of the fit (parallel groupbys, bounded memory)
# Known, harmless warnings of the Merlin 23.08 stack (docs/FACTS.md names their sources).
_QUIET = (".*tensorflow.*", ".*CPU mode.*experimental.*")
CONNECT_TIMEOUT_S = 5.0  # reaching a running scheduler takes milliseconds; fail fast otherwise
WORKER_WAIT_S = 30.0  # workers started together with the scheduler need a few seconds to join
# What distributed raises on a timeout: asyncio's TimeoutError, the builtin one from Python 3.11.
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)


@contextlib.contextmanager
def quiet_merlin() -> Iterator[None]:
    """Silence the two known Merlin warnings (TensorFlow missing, CPU mode experimental)."""
    with warnings.catch_warnings():
        for message in _QUIET:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


def import_nvtabular() -> Any:
    """Import NVTabular, or raise ValueError pointing at ``--engine pandas``."""
    try:
        with quiet_merlin():
            import nvtabular
    except ImportError as exc:
        raise ValueError(
            f"--engine nvtabular needs NVTabular ({exc}); install the project's Merlin pins or "
            f"run with --engine pandas"
        ) from exc
    return nvtabular


def gpu_available() -> bool:
    """True when Merlin sees a GPU and cuDF imports (then the Workflow runs on cuDF)."""
    with quiet_merlin():
        from merlin.core.compat import HAS_GPU
    if not HAS_GPU:
        return False
    try:
        import cudf  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def dask_client(workers: int, gpu: bool, scheduler: str | None = None) -> Iterator[Any]:
    """A Dask client: on the cluster at ``scheduler``, else on a local cluster of ``workers``.

    With ``scheduler`` the cluster is someone else's: the client connects to it (``connect``)
    and only disconnects at the end; the scheduler and its workers keep running. Otherwise a
    local cluster is started and closed: LocalCUDACluster (one worker per GPU) when ``gpu``, else a
    LocalCluster of single-threaded worker processes; None for one process (``workers <= 1``).
    Scripts that start a local cluster need an ``if __name__ == "__main__":`` guard.
    """
    if scheduler:
        client = connect(scheduler)
        try:
            yield client
        finally:
            client.close()  # never client.shutdown(): that would stop a cluster we did not start
        return
    if workers <= 1:
        yield None
        return
    from distributed import Client

    if gpu:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=workers, dashboard_address=None)
    else:
        from distributed import LocalCluster

        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def connect(
    address: str, timeout_s: float = CONNECT_TIMEOUT_S, workers_wait_s: float = WORKER_WAIT_S
) -> Any:
    """A client of the running Dask scheduler at ``address`` that has at least one worker.

    Raises
    ------
    ValueError
        If the scheduler cannot be reached within ``timeout_s`` seconds, or no worker joins it
        within ``workers_wait_s`` seconds; the message names the address and how to start one.
    """
    from distributed import Client

    start = (
        f"start one with `dask scheduler --host HOST` and workers with `dask worker {address}` "
        f"(`dask cuda worker {address}` on GPU nodes)"
    )
    try:
        client = Client(address, timeout=timeout_s)
    except (OSError, *TIMEOUTS, ValueError) as exc:
        raise ValueError(
            f"cannot reach the Dask scheduler at {address} within {timeout_s:g} s ({exc}); "
            f"check the address and that it is running ({start}), or drop --scheduler and unset "
            f"DASK_SCHEDULER_ADDRESS to run the ETL on this machine"
        ) from None
    try:
        client.wait_for_workers(1, timeout=workers_wait_s)
    except (OSError, *TIMEOUTS) as exc:
        client.close()
        raise ValueError(
            f"the Dask scheduler at {address} has no worker after {workers_wait_s:g} s ({exc}); "
            f"{start}"
        ) from None
    return client


def cluster_workers(client: Any) -> int:
    """How many workers the cluster of ``client`` has now (1 without a client)."""
    if client is None:
        return 1
    return len(client.scheduler_info()["workers"])


def build_workflow(category_dir: Path, client: Any = None) -> Any:
    """The ETL Workflow: Categorify each raw id column and rename it to the model column."""
    nvt = import_nvtabular()
    from nvtabular.ops import Categorify, Rename

    user = [RAW_USER] >> Categorify(out_path=str(category_dir)) >> Rename(name=USER)
    item = [RAW_ITEM] >> Categorify(out_path=str(category_dir)) >> Rename(name=ITEM)
    if client is not None:
        from merlin.core.utils import set_dask_client

        # What Workflow(client=...) does, without its deprecation warning.
        set_dask_client(client)
    return nvt.Workflow(user + item)


def vocab_workflow(encoding: Encoding, workdir: Path) -> Any:
    """The ETL Workflow with fixed vocabularies (``--vocab-from``): Categorify maps the raw ids
    of ``encoding`` to ids ``3 + position`` in its order, anything else to the OOV id, as a fitted
    one does; nothing is fitted (its fit is a no-op, run on a frame of one row)."""
    nvt = import_nvtabular()
    import pandas as pd
    from nvtabular.ops import Categorify, Rename

    workdir = workdir.resolve()
    ops = []
    for raw, name, vocab in ((RAW_USER, USER, encoding.user), (RAW_ITEM, ITEM, encoding.item)):
        values = pd.Series(to_numpy(vocab.raw), name=raw)
        op = Categorify(out_path=str(workdir), vocabs={raw: values})
        ops.append([raw] >> op >> Rename(name=name))
    workflow = nvt.Workflow(ops[0] + ops[1])
    first = {RAW_USER: encoding.user.raw[:1], RAW_ITEM: encoding.item.raw[:1]}
    gpu = array_module(*first.values()).__name__ == "cupy"
    with quiet_merlin():
        from merlin.io import Dataset

        workflow.fit(Dataset(_frame(first), cpu=not gpu))
    return workflow


def _frame(columns: dict[str, Any]) -> Any:
    """A cuDF frame for cupy columns, else pandas."""
    if array_module(*columns.values()).__name__ == "cupy":
        import cudf

        return cudf.DataFrame(columns)
    import pandas as pd

    return pd.DataFrame(columns)


def fit_workflow(kept: Any, workdir: Path, client: Any = None) -> Any:
    """Fit the Workflow on every kept rating; its categories go to ``workdir``.

    Parameters
    ----------
    kept
        ``(user, item)`` raw-id arrays ``[n]`` (numpy or cupy), or parquet files holding the
        columns ``userId`` and ``movieId`` (the partitioned ETL's kept ratings).
    workdir
        Scratch folder of the fit (every Dask worker must see it).
    client
        Dask client: the fit runs on its workers. In-memory arrays are then first written to
        parquet in ``workdir`` and each worker reads its own row groups: shipping an in-memory
        frame through the scheduler is slower.
    """
    # Absolute: the workers of a --scheduler cluster run in other directories (or on other hosts).
    workdir = workdir.resolve()
    workflow = build_workflow(workdir, client)
    with quiet_merlin():
        from merlin.io import Dataset

    if isinstance(kept, tuple):
        user, item = kept
        gpu = array_module(user).__name__ == "cupy"
        if client is None:
            frame = _frame({RAW_USER: user, RAW_ITEM: item})
            parts = max(1, math.ceil(len(frame) / PART_ROWS))
            with quiet_merlin():
                workflow.fit(Dataset(frame, npartitions=parts, cpu=not gpu))
            order_ties(workdir, client)
            return workflow
        path = workdir / "fit-input.parquet"
        workdir.mkdir(parents=True, exist_ok=True)
        table = pa.table({RAW_USER: to_numpy(user), RAW_ITEM: to_numpy(item)})
        pq.write_table(table, path, row_group_size=PART_ROWS)
        del table
        kept = [path]
    else:
        gpu = gpu_available()
    if client is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        check_workers_see(client, workdir)
    with quiet_merlin():
        files = [str(f) for f in kept]
        dataset = Dataset(files, engine="parquet", part_size=f"{PART_ROWS * 8}B", cpu=not gpu)
        workflow.fit(dataset)
    order_ties(workdir, client)
    return workflow


def order_ties(workdir: Path, client: Any = None) -> None:
    """Give the fitted vocabularies in ``workdir/categories`` one order on every host: by count,
    descending (Categorify's frequency order), ties by ascending raw id.

    Categorify sorts by count alone with an unstable sort, so the order of equally frequent ids
    (most of a long tail) depends on the sort kernel: numpy's AVX-512 sort, its generic one and
    cuDF's each give another, and so do the ids of the ETL. The Workflow reads the files when it
    transforms, so rewriting them after the fit sets its ids (after the tables the fit cached
    in this process and on ``client``'s workers are dropped). Each file is replaced atomically.
    """
    import pandas as pd
    from merlin.io.worker import clean_worker_cache

    for raw in (RAW_USER, RAW_ITEM):
        path = workdir / "categories" / f"unique.{raw}.parquet"
        if not path.is_file():  # Categorify's layout (split_out 1): one file per column
            raise ValueError(
                f"{path}: Categorify's vocabulary file of {raw!r} is missing after the fit; "
                "this ETL needs NVTabular 23.08's one-file-per-column layout (docs/PLATFORMS.md)"
            )
        vocab = pd.read_parquet(path)  # index: model ids, from the first id after the reserved
        first = vocab.index[0] if len(vocab) else 0
        size = f"{raw}_size"
        vocab = vocab.sort_values([size, raw], ascending=[False, True], kind="stable")
        vocab.index = pd.RangeIndex(first, first + len(vocab))
        tmp = path.with_name(f".{path.name}.tmp")
        vocab.to_parquet(tmp)
        os.replace(tmp, path)
    clean_worker_cache()
    if client is not None:
        client.run(clean_worker_cache)


def check_workers_see(client: Any, path: Path) -> None:
    """Raise ValueError naming the Dask workers that cannot see directory ``path``.

    The fit's input and Categorify's category files are exchanged through ``path``: every worker
    must see the same directory (one host, or a filesystem mounted at the same path everywhere).
    """
    seen = client.run(os.path.isdir, str(path))
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if blind:
        raise ValueError(
            f"Dask workers {', '.join(blind)} do not see {path}: --out must be on a filesystem "
            f"that every worker mounts at the same path (e.g. NFS), or run without --scheduler"
        )


def workflow_encoding(workflow: Any, users: Any, items: Any) -> Encoding:
    """Apply the fitted Workflow to the distinct raw ids and return the resulting vocabularies.

    Parameters
    ----------
    workflow
        Fitted Workflow.
    users, items
        Distinct raw ids (every id the Workflow was fitted on), shapes ``[n_users]``, ``[n_items]``.
    """
    xp = array_module(users, items)
    n = max(users.size, items.size)
    # One frame for both columns: pad the shorter with copies of its first id (rows are
    # independent in a transform), then keep the first n_users / n_items outputs.
    pad = {RAW_USER: users, RAW_ITEM: items}
    for name, values in pad.items():
        pad[name] = xp.concatenate([values, xp.full(n - values.size, values[0], values.dtype)])
    with quiet_merlin():
        out = workflow.transform(_frame(pad))
    schema = workflow.output_schema
    vocabs = {}
    for column, raw in ((USER, users), (ITEM, items)):
        codes = out[column].values[: raw.size]
        cardinality = int(schema[column].properties["embedding_sizes"]["cardinality"])
        vocabs[column] = _vocabulary(codes, raw, cardinality, column)
    return Encoding(user=vocabs[USER], item=vocabs[ITEM], engine="nvtabular")


def _vocabulary(codes: Any, raw: Any, cardinality: int, column: str) -> Vocabulary:
    """Order ``raw`` by ``codes``; check the codes are one contiguous range [lo, lo + n)."""
    xp = array_module(codes, raw)
    lo = int(codes.min())
    by_code = xp.full(raw.size, -1, dtype=xp.int64)
    by_code[codes - lo] = raw
    if (
        int(codes.max()) != lo + raw.size - 1
        or bool((by_code < 0).any())
        or lo + raw.size > cardinality
    ):
        raise RuntimeError(
            f"Categorify ids of {column} are not one contiguous range: {lo}..{int(codes.max())}"
        )
    return Vocabulary(raw=by_code, lo=lo, cardinality=cardinality)


def save_workflow(workflow: Any, path: Path) -> dict[str, dict[str, Any]]:
    """Save the Workflow to ``path``; return where its vocabularies are (for ``metadata.json``)."""
    with quiet_merlin():
        workflow.save(str(path))
    files = {}
    for key, raw in (("user", RAW_USER), ("item", RAW_ITEM)):
        found = sorted((path / "categories").glob(f"unique.{raw}*.parquet"))
        if len(found) != 1:
            raise RuntimeError(
                f"expected one vocabulary file for {raw} in {path}/categories, found {found}"
            )
        files[key] = found[0]
    return files


def remove_fit_dir(path: Path) -> None:
    """Remove the Categorify scratch directory of a fit (its files were copied by ``save``)."""
    shutil.rmtree(path, ignore_errors=True)
