"""The one entry of every benchmark module: resolve its config, run, write the results, one-line errors.

A benchmark module defines ``CONFIG`` (its typed config, ``ncf.core.config.Config``; the command
line is generated from it) and ``run(cfg)``; ``run`` returns an exit code, or a ``Results`` that
this module writes as ``<results-dir>/<name>.json`` and ``.md`` (and ``.png`` when it has a
``Plot`` and ``--no-plot`` is not given). The JSON holds the resolved config (``"config"``) and the
command as the user typed it: ``python -m ncf.bench.X ARGS`` (the module's ``__main__`` block is
``sys.exit(entry.main(sys.modules[__name__]))``) or ``ncf bench NAME ARGS`` (bench/cli.py); both
call ``run_bench``. Config files of a bench are those of stage ``bench NAME``. Results in the way
that no bench wrote are refused before the run: under ``results_name(cfg)`` where the module
defines it, else ``cfg.name``.
"""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ncf.bench.common import RESULTS_DIR, check_results_replaceable, write_results
from ncf.core.config import Config, resolve
from ncf.core.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, HANDLED, report


class BenchError(RuntimeError):
    """A benchmark could not measure, for the reason its message gives (no traceback needed)."""


# Errors reported as one line: bad input and environment faults (ncf.core.errors: exit 2 or 1),
# a failed subprocess (its exit code; it printed its own line), BenchError (exit 2).
ERRORS = (*HANDLED, subprocess.CalledProcessError, BenchError)


@dataclass
class Plot:
    """A ``ncf.bench.plots.line_plot`` of the rows (see its parameters)."""

    x: str
    y: str
    series: tuple[str, ...]
    title: str
    logx: bool = False
    logy: bool = False
    y2: str | None = None


@dataclass
class Results:
    """What a benchmark measured, for ``write``: the table, its title and the facts beside it."""

    name: str
    rows: list[dict[str, Any]]
    columns: Sequence[str]
    title: str
    results_dir: Path = RESULTS_DIR
    extra: dict[str, Any] = field(default_factory=dict)
    plot: Plot | None = None
    exit_code: int = 0  # e.g. 1 when the run measured that a criterion failed


def command_line(prog: str, argv: Sequence[str]) -> str:
    """``prog`` followed by ``argv`` shell-quoted, as it can be pasted back into a shell."""
    return f"{prog} {shlex.join(argv)}".strip()


def write(results: Results, command: str, plot: bool = True) -> dict[str, Any]:
    """Write the JSON and markdown results (``ncf.bench.common.write_results``) and the PNG plot."""
    payload = write_results(
        results.name,
        results.rows,
        results.columns,
        command,
        extra=results.extra,
        results_dir=results.results_dir,
        title=results.title,
    )
    if plot and results.plot is not None:
        from dataclasses import asdict

        from ncf.bench.plots import line_plot

        path = results.results_dir / f"{results.name}.png"
        line_plot(results.rows, path=path, **asdict(results.plot))
        print(f"wrote {path}")
    return payload


def execute(module: ModuleType, cfg: Config, command: str, prog: str) -> int:
    """Run ``module.run(cfg)`` and write what it returns (with ``cfg`` as its ``"config"`` and
    ``command`` as the recorded command); errors (``ERRORS``) as one line ``PROG: error: MESSAGE``
    on stderr and the exit code of ``ncf.core.errors``."""
    try:
        if hasattr(cfg, "resolved"):  # settings whose default depends on others, filled in
            cfg = cfg.resolved()
        name = module.results_name(cfg) if hasattr(module, "results_name") else None
        if name is None and isinstance(getattr(cfg, "name", None), str):
            name = cfg.name
        if name and hasattr(cfg, "results_dir"):
            check_results_replaceable(Path(cfg.results_dir), name)  # before measuring
        out = module.run(cfg)
        if isinstance(out, Results):
            out.extra = {**out.extra, "config": cfg.to_dict()}
            write(out, command, plot=getattr(cfg, "plot", True))
            return out.exit_code
        return int(out or 0)
    except ERRORS as exc:
        code = report(prog, exc, cfg)
        if isinstance(exc, subprocess.CalledProcessError):  # the child's own code: 2 or 1
            return exc.returncode if exc.returncode == EXIT_BAD_INPUT else EXIT_ENVIRONMENT
        return code


def run_bench(module: ModuleType, name: str, argv: Sequence[str], prog: str) -> int:
    """Resolve ``module.CONFIG`` from ``argv`` (stage ``bench NAME``), run it, write its results;
    the exit code (2 and one line for a bad command line)."""
    try:
        cfg = resolve(module.CONFIG, argv, f"bench {name}", prog)
    except HANDLED as exc:
        return report(prog, exc)
    return execute(module, cfg, command_line(prog, argv), prog)


def main(module: ModuleType | str, argv: Sequence[str] | None = None) -> int:
    """``python -m MODULE ARGV`` (default ``sys.argv[1:]``): resolve, run, write; the exit code.

    ``module`` is a benchmark module or its name; run as ``python -m``, a module passes itself
    (``sys.modules[__name__]``), whose spec still names it ``ncf.bench.X``.
    """
    if isinstance(module, str):
        module = importlib.import_module(module)
    name = module.__spec__.name
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_bench(module, bench_name(name), argv, f"python -m {name}")


def bench_name(module_name: str) -> str:
    """The ``ncf bench`` subcommand of a bench module (``ncf.bench.profile_step`` -> profile)."""
    from ncf.bench.cli import BENCHES  # the one table of benches (cli imports this module)

    found = [name for name, (module, _) in BENCHES.items() if module == module_name]
    return found[0] if found else module_name.rsplit(".", 1)[-1]
