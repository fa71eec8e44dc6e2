"""The README's commands are true: every `ncf ...`, `torchrun ... -m ncf.cli ...` and
`python -m bench.* ...` it shows parses with the project's own parsers (the end-to-end tests run
the stages themselves)."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from ncf.cli import parse_command

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


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
            if re.match(r"(ncf \w|torchrun .*-m ncf\.cli |python -m bench\.\w+)", part):
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
    assert len([c for c in COMMANDS if c.startswith("python -m bench.")]) >= 5


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_parses(command: str):
    argv = shlex.split(command)
    if argv[0] == "torchrun":
        argv = ["ncf", *argv[argv.index("ncf.cli") + 1 :]]
    if argv[0] == "ncf":
        parse_command(argv[1:])
        return
    module = importlib.import_module(argv[2])
    parser = argparse.ArgumentParser(prog=argv[2])
    module.add_arguments(parser)
    parser.parse_args(argv[3:])
