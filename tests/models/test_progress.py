"""The tqdm bar of `ncf train`: drawn on a terminal, absent when stderr is a pipe or with
--no-progress (so logs and CI output hold only the DLLogger lines)."""

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

ARGS = ["--epochs", "1", "--batch-size", "256", "--threads", "1", "--device", "cpu"]


def _ncf_train(etl: Path, out: Path, extra: list[str], terminal: bool) -> str:
    """Run `ncf train` with stdout and stderr on a pseudo-terminal (120 columns) or on a pipe."""
    argv = [sys.executable, "-m", "ncf.cli", "train", "--data", str(etl), "--out", str(out)]
    argv += ARGS + extra
    if not terminal:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr
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


@pytest.mark.parametrize(
    ("terminal", "extra", "bar"),
    [(True, [], True), (True, ["--no-progress"], False), (False, [], False)],
    ids=["terminal", "terminal-no-progress", "pipe"],
)
def test_progress_bar_only_on_a_terminal(etl_dir, tmp_path, terminal, extra, bar):
    text = _ncf_train(etl_dir, tmp_path / "run", extra, terminal)
    assert "hr@10" in text  # the DLLogger lines are there in every case
    drawn = [part for part in text.split("\r") if part.startswith("epoch 0:") and "batch/s" in part]
    assert bool(drawn) == bar, text[-2000:]
