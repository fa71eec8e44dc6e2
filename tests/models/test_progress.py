"""The tqdm bar of `ncf train`: drawn on a terminal by rank 0 unless --no-progress, so logs and CI
output hold only the DLLogger lines. The decision is a pure function; one run on a pseudo-terminal
checks that it is wired to the real stderr and that tqdm draws there."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from ncf.models.progress import show_bar

ARGS = ["--epochs", "1", "--batch-size", "256", "--threads", "1", "--device", "cpu"]


@pytest.mark.parametrize(
    ("requested", "terminal", "is_main", "bar"),
    [
        (True, True, True, True),
        (False, True, True, False),  # --no-progress
        (True, False, True, False),  # stderr is a pipe or a file
        (True, True, False, False),  # ranks other than 0
        (False, False, True, False),
        (True, False, False, False),
        (False, True, False, False),
        (False, False, False, False),
    ],
)
def test_bar_only_when_requested_on_a_terminal_by_rank_0(requested, terminal, is_main, bar):
    assert show_bar(requested, terminal, is_main) is bar


def _ncf_train_on_a_terminal(etl: Path, out: Path) -> str:
    """Run `ncf train` with stdin, stdout and stderr on a pseudo-terminal 120 columns wide."""
    argv = [sys.executable, "-m", "ncf.cli", "train", "--data", str(etl), "--out", str(out), *ARGS]
    master, slave = os.openpty()
    # A fresh pty is 0x0; tqdm draws nothing 0 columns wide, a real terminal is never that.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                raise TimeoutError("ncf train wrote nothing for 120 s")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the pty has exited
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        assert proc.wait(timeout=60) == 0, b"".join(chunks)[-2000:]
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_is_drawn_on_a_terminal(etl_dir, tmp_path):
    text = _ncf_train_on_a_terminal(etl_dir, tmp_path / "run")
    assert "hr@10" in text  # the DLLogger lines are there too
    drawn = [part for part in text.split("\r") if part.startswith("epoch 0:") and "batch/s" in part]
    assert drawn, text[-2000:]
