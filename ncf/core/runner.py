"""Run ``ncf`` stages one after another, each as its own process, handed its config as a file.

The one pipeline runner (``ncf run``, ``ncf bench all``): each stage's resolved config is written
to ``CONFIG_DIR/<name>.json`` and run as ``python -m ncf.cli STAGE --config FILE``, so the stage
frees its memory on exit, logs and writes the config it ran with, and can be rerun alone with the
command recorded for it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ncf.core.config import Config, write_config


class StageFailed(RuntimeError):
    """A stage exited non-zero; the message says how to rerun it alone."""


@dataclass
class Runner:
    """Runs stages with their configs, keeping a record of each (``records``)."""

    config_dir: Path
    records: list[dict] = field(default_factory=list)

    def run(self, name: str, stage: str, cfg: Config) -> None:
        """Run ``ncf STAGE --config CONFIG_DIR/NAME.json``; raise ``StageFailed`` if it fails.

        ``stage`` is the command (``train``, or ``bench train``), ``name`` this step's record name.
        """
        path = write_config(self.config_dir / f"{name}.json", cfg, stage)
        words = [*stage.split(), "--config", str(path)]
        command = "ncf " + shlex.join(words)
        print(f"\n=== {name}: {command}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "ncf.cli", *words], check=False).returncode
        seconds = round(time.perf_counter() - t0, 2)
        self.records.append({"stage": name, "command": command, "seconds": seconds, "rc": rc})
        if rc != 0:
            raise StageFailed(f"stage {name!r} failed (exit {rc}); rerun it alone with: {command}")
