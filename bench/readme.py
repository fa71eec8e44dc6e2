"""Rewrite the README's results section from ``bench/results/*.md`` (and the PNG plots).

Only the text between ``<!-- results:start -->`` and ``<!-- results:end -->`` is replaced; the
markers must each appear exactly once, start before end, or nothing is written.

    python -m ncf.bench.readme                    # README.md from bench/results/
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ncf.bench import entry
from ncf.bench.common import RESULTS_DIR
from ncf.bench.summary import write_summary
from ncf.core.atomic import write_text
from ncf.core.config import Config, setting

START = "<!-- results:start -->"
END = "<!-- results:end -->"
ORDER = (
    "summary",
    "etl",
    "etl-scale",
    "train",
    "inference",
    "triton",
)  # section order; other results follow by name
DEFAULT_README = Path(__file__).resolve().parents[1] / "README.md"


def section(results_dir: str | os.PathLike, readme_dir: str | os.PathLike) -> str:
    """Markdown of every ``<name>.md`` in ``results_dir`` (``ORDER`` first), each followed by its
    ``<name>.png`` if there is one, linked relative to ``readme_dir``."""
    results_dir = Path(results_dir)
    found = sorted(p.stem for p in results_dir.glob("*.md"))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    parts = []
    for name in names:
        text = (results_dir / f"{name}.md").read_text(encoding="utf-8").strip()
        png = results_dir / f"{name}.png"
        if png.is_file():
            rel = Path(os.path.relpath(png.resolve(), Path(readme_dir).resolve())).as_posix()
            text += f"\n\n![{name}]({rel})"
        parts.append(text)
    if not parts:
        return "_No benchmark results yet: run `make bench`._"
    return "\n\n".join(parts)


def replace_section(text: str, body: str, source: str = "README") -> str:
    """``text`` with everything between the markers replaced by ``body``.

    Raises
    ------
    ValueError
        A marker is missing or repeated, or the end marker comes first.
    """
    starts, ends = text.count(START), text.count(END)
    if starts != 1 or ends != 1:
        raise ValueError(
            f"{source}: expected exactly one {START!r} and one {END!r} (found {starts} and "
            f"{ends}); add the pair where the benchmark results belong"
        )
    head, rest = text.split(START)
    if END not in rest:
        raise ValueError(f"{source}: {END!r} comes before {START!r}; swap them")
    _, tail = rest.split(END)
    return f"{head}{START}\n{body.strip()}\n{END}{tail}"


def update_readme(readme: str | os.PathLike, results_dir: str | os.PathLike = RESULTS_DIR) -> bool:
    """Rewrite the results section of ``readme`` (atomically); True if the file changed."""
    readme = Path(readme)
    if not readme.is_file():
        raise FileNotFoundError(f"{readme} not found (pass --readme)")
    old = readme.read_text(encoding="utf-8")
    write_summary(Path(results_dir))
    new = replace_section(old, section(results_dir, readme.parent), str(readme))
    if new != old:
        write_text(readme, new)
    return new != old


@dataclass
class ReadmeBench(Config):
    """Rewrite the README results section from the results folder."""

    readme: Path = setting(DEFAULT_README, help="README to rewrite")
    results_dir: Path = setting(RESULTS_DIR, help="results to read")


CONFIG = ReadmeBench


def run(args: ReadmeBench) -> int:
    changed = update_readme(args.readme, args.results_dir)
    print(f"{args.readme}: results section {'rewritten' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(entry.main(sys.modules[__name__]))
