"""The README's commands are true: every `ncf ...`, `torchrun ... -m ncf.cli ...` and
`python -m ncf.bench.* ...` it shows parses with the project's own parsers (the end-to-end tests run
the stages themselves)."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

from ncf.bench.entry import bench_name
from ncf.bench.readme import END, START
from ncf.cli import parse_command
from ncf.core.config import resolve

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The results section (written by `ncf bench readme` from bench/results/*.md) records the commands
# the results were measured with, as they were typed then: a record, not a command to run now.
_BEFORE, _, _REST = README.partition(START)
README = _BEFORE + _REST.partition(END)[2]


def _commands() -> list[str]:
    """Inline `code` and fenced bash lines that invoke the project's entry points."""
    spans = re.findall(r"`([^`\n]+)`", README)
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        spans += block.splitlines()
    found = []
    for span in spans:
        for part in span.split("&&"):
            part = part.strip()
            label = "..." in part or "<" in part or re.fullmatch(r"ncf \w+", part)
            if label:  # a stage's name in a table ("ncf etl"), not a command to run
                continue
            if re.match(r"(ncf \w|torchrun .*-m ncf\.cli |python -m ncf\.bench\.\w+)", part):
                found.append(part)
    return sorted(set(found))


COMMANDS = _commands()


def test_no_command_is_quoted_as_one_word():
    """e.g. `'python -m ncf.bench.soak' --repo R` (a shlex.join of the program name) runs nothing."""
    quoted = [s for s in re.findall(r"`([^`\n]+)`", README) if re.match(r"'(ncf|python) ", s)]
    assert not quoted


def test_the_readme_shows_every_stage():
    stages = {c.split()[1] for c in COMMANDS if c.startswith("ncf ")}
    assert {"synth", "etl", "train", "evaluate", "export", "serve", "bench", "run"} <= stages
    assert any(c.startswith("torchrun") for c in COMMANDS)
    assert len([c for c in COMMANDS if c.startswith("python -m ncf.bench.")]) >= 5


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_parses(command: str):
    argv = shlex.split(command)
    if argv[0] == "torchrun":
        argv = ["ncf", *argv[argv.index("ncf.cli") + 1 :]]
    if argv[0] == "python":  # python -m ncf.bench.X: the bench's generated command line
        module = importlib.import_module(argv[2])
        resolve(module.CONFIG, argv[3:], f"bench {bench_name(argv[2])}")
        return
    parse_command(argv[1:])
