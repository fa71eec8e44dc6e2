"""The one entry of every benchmark module: parse, run, write the results, one-line errors.

A benchmark module defines ``add_arguments(parser)`` and ``run(args)``; ``run`` returns an exit
code, or a ``Results`` that this module writes as ``<results-dir>/<name>.json`` and ``.md`` (and
``.png`` when it has a ``Plot`` and ``--no-plot`` is not given). Its ``__main__`` block is
``sys.exit(entry.main(sys.modules[__name__]))``; ``ncf bench NAME`` (bench/cli.py) calls ``execute`` on the
arguments it parsed. Either way the command recorded in the results is the one the user typed:
``python -m bench.X ARGS`` or ``ncf bench NAME ARGS``, in ``args.cmdline``.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ncf.bench.common import RESULTS_DIR, write_results


class BenchError(RuntimeError):
    """A benchmark could not measure, for the reason its message gives (no traceback needed)."""


# Errors reported as one line and exit code 2: bad input, a failed subprocess, BenchError.
ERRORS = (ValueError, FileNotFoundError, FileExistsError, subprocess.CalledProcessError, BenchError)


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


def execute(module: ModuleType, args: argparse.Namespace, prog: str) -> int:
    """Run ``module.run(args)`` and write what it returns; errors (``ERRORS``) as one line
    ``PROG: error: MESSAGE`` on stderr and exit code 2. ``args.cmdline`` is the recorded command.
    """
    try:
        out = module.run(args)
        if isinstance(out, Results):
            write(out, args.cmdline, plot=not getattr(args, "no_plot", False))
            return out.exit_code
        return int(out or 0)
    except ERRORS as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"{prog}: error: {first}", file=sys.stderr)
        return 2


def parser_for(module: ModuleType, prog: str) -> argparse.ArgumentParser:
    """The module's parser under ``prog``, described by its docstring's first line."""
    doc = (module.__doc__ or "").strip().splitlines()
    parser = argparse.ArgumentParser(prog=prog, description=doc[0] if doc else None)
    module.add_arguments(parser)
    return parser


def main(module: ModuleType | str, argv: Sequence[str] | None = None) -> int:
    """``python -m MODULE ARGV`` (default ``sys.argv[1:]``): parse, run, write; the exit code.

    ``module`` is a benchmark module or its name; run as ``python -m``, a module passes itself
    (``sys.modules[__name__]``), whose spec still names it ``bench.X``.
    """
    if isinstance(module, str):
        module = importlib.import_module(module)
    prog = f"python -m {module.__spec__.name}"
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser_for(module, prog).parse_args(argv)
    args.cmdline = command_line(prog, argv)
    return execute(module, args, prog)
