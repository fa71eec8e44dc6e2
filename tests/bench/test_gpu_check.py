"""bench/gpu_check.sh, the one call a lent GPU gets: every command it would run parses with the
project's own parsers (its dry run prints them), so a typo cannot waste the device's minutes."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ncf.bench import etl_kernels as bench_etl_kernels
from ncf.bench import inference as bench_inference
from ncf.bench import profile_step as bench_profile
from ncf.bench import train as bench_train
from ncf.bench.entry import bench_name
from ncf.cli import parse_command
from ncf.core.config import ParseError, resolve

ROOT = Path(__file__).resolve().parents[2]
BENCH_MODULES = {
    "ncf.bench.train": bench_train,
    "ncf.bench.inference": bench_inference,
    "ncf.bench.profile_step": bench_profile,
    "ncf.bench.etl_kernels": bench_etl_kernels,
}


def _dry_run(tmp_path: Path) -> list[list[str]]:
    env = {
        **os.environ,
        "GPU_CHECK_DRY_RUN": "1",
        "OUT": str(tmp_path / "out"),
        "GPU_CHECK_DATA": str(tmp_path / "data"),
        "PYTHON": "python3",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [shlex.split(line[4:]) for line in done.stdout.splitlines() if line.startswith("DRY ")]


def _parse_module(module: str, argv: list[str]) -> object:
    """The resolved config of ``python -m MODULE ARGV``."""
    if module == "ncf.cli":
        return parse_command(argv)
    return resolve(BENCH_MODULES[module].CONFIG, argv, f"bench {bench_name(module)}")


def test_every_step_parses_and_writes_under_out(tmp_path: Path):
    commands = _dry_run(tmp_path)
    modules = [cmd[2] for cmd in commands if cmd[1:2] == ["-m"]]
    assert modules == [
        "pytest",
        "ncf.cli",
        "ncf.cli",
        "ncf.bench.train",
        "ncf.bench.inference",
        "ncf.bench.train",
        "ncf.bench.profile_step",
        "ncf.bench.train",
        "ncf.bench.etl_kernels",
    ]
    for cmd in commands:
        if cmd[1:3] == ["-m", "pytest"]:
            files = [a for a in cmd[3:] if a.endswith(".py")]
            assert "-m" in cmd and cmd[cmd.index("-m", 2) + 1] == "cuda"
            assert files and all(re.search(r"mark\.cuda", (ROOT / f).read_text()) for f in files)
        elif cmd[1:2] == ["-m"]:
            args = _parse_module(cmd[2], cmd[3:])
            if cmd[2].startswith("ncf.bench."):
                on_gpu = (
                    "cupy" in args.devices if hasattr(args, "devices") else args.device == "cuda"
                )
                assert on_gpu, cmd
                assert Path(args.results_dir) == tmp_path / "out"
    names = [c[c.index("--name") + 1] for c in commands if "--name" in c]
    assert len(names) == len(set(names)), f"two steps write the same results file: {names}"


@pytest.mark.parametrize("bad", [["--precisions", "tf23"], ["--batch-sizes", "1M"]])
def test_the_parsers_do_refuse_typos(bad: list[str]):
    with pytest.raises(ParseError):
        _parse_module("ncf.bench.train", ["--device", "cuda", *bad])
