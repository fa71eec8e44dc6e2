"""Shared benchmark plumbing: machine facts, peak-RSS sampling, timing, JSON + markdown output."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from ncf.core import textfile
from ncf.core.atomic import write_json, write_text

RESULTS_DIR = Path(__file__).resolve().parent / "results"

_PACKAGES = (
    "torch",
    "nvtabular",
    "merlin-core",
    "numpy",
    "pandas",
    "pyarrow",
    "onnxruntime",
    "nvidia-pytriton",
    "tritonclient",
    "cudf-cu12",
    "cupy-cuda12x",
    "cupy-cuda13x",
)


def machine_info() -> dict[str, Any]:
    """CPU/GPU/memory facts and package versions, recorded with every result."""
    info: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": {},
    }
    for pkg in _PACKAGES:
        try:
            info["versions"][pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpus"] = torch.cuda.device_count()
    except ImportError:
        pass
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class PeakRSS:
    """Sample this process's (and its children's) RSS in a thread; ``peak_bytes`` is the maximum.

    ``ru_maxrss`` only ever grows over a process's life, so it cannot give per-stage peaks; a sampler
    (every ``interval`` s) can. Use as a context manager around one stage.
    """

    def __init__(self, interval: float = 0.01, children: bool = True):
        self.interval = interval
        self.children = children
        self.peak_bytes = 0
        self.process_peak_bytes = 0  # the largest RSS of any one process (this one or a child)
        self._stop = threading.Event()
        self._proc = psutil.Process()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        procs = [self._proc] + (self._proc.children(recursive=True) if self.children else [])
        total = 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:  # a child that exited meanwhile
                continue
            total += rss
            self.process_peak_bytes = max(self.process_peak_bytes, rss)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self.peak_bytes = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self._sample())

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30


@contextmanager
def stage(record: dict[str, Any], name: str) -> Iterator[None]:
    """Time a stage and sample its peak RSS into ``record[name] = {"seconds", "peak_rss_gib"}``."""
    t0 = time.perf_counter()
    with PeakRSS() as rss:
        yield
    record[name] = {
        "seconds": round(time.perf_counter() - t0, 3),
        "peak_rss_gib": round(rss.peak_gib, 3),
    }


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub markdown table of ``rows`` restricted to ``columns`` (floats to 4 significant digits)."""

    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out)


RESULT_KEYS = {"bench", "date", "command", "machine", "rows"}  # what every results JSON holds


def is_bench_result(path: Path) -> bool:
    """Whether ``path`` is a results JSON that ``write_results`` wrote."""
    try:
        doc = textfile.read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and RESULT_KEYS <= doc.keys()


def check_results_replaceable(results_dir: Path, name: str) -> None:
    """Raise unless the files of result ``name`` in ``results_dir`` are absent or an earlier run's
    (its ``<name>.json`` is a bench result): a bench rewrites only its own results.

    Raises
    ------
    FileExistsError
        A ``<name>.json``, ``.md`` or ``.png`` is in the way that no bench wrote.
    """
    paths = [results_dir / f"{name}{ext}" for ext in (".json", ".md", ".png")]
    present = [p for p in paths if p.exists() or p.is_symlink()]
    if not present or (paths[0].is_file() and is_bench_result(paths[0])):
        return
    raise FileExistsError(
        f"{present[0]} is not a result of `ncf bench` (no {name}.json bench record beside it): "
        "a bench rewrites only its own results; choose another --results-dir or --name, or move "
        "it away"
    )


def write_results(
    name: str,
    rows: list[dict[str, Any]],
    columns: Sequence[str],
    command: str,
    extra: dict[str, Any] | None = None,
    results_dir: Path = RESULTS_DIR,
    title: str | None = None,
) -> dict[str, Any]:
    """Write ``<results_dir>/<name>.json`` and ``<name>.md`` atomically, print the table, return the payload.

    The JSON holds machine facts, versions, the command, the date and every row; the markdown file
    holds a heading line (date, machine, command) and the table, and is what the README embeds.
    """
    machine = machine_info()
    date = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    payload = {"bench": name, "date": date, "command": command, "machine": machine, "rows": rows}
    payload.update(extra or {})
    table = markdown_table(rows, columns)
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['cores']} cores"
    md_text = f"#### {title or name}\n\n_{date} on {where}; `{command}`_\n\n{table}\n"
    results_dir.mkdir(parents=True, exist_ok=True)
    check_results_replaceable(results_dir, name)
    write_json(results_dir / f"{name}.json", payload)
    write_text(results_dir / f"{name}.md", md_text)
    print(table)
    print(f"wrote {results_dir / (name + '.json')}")
    return payload
