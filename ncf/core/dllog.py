"""DLLogger-compatible logging.

NVIDIA's DLLogger (used by DeepLearningExamples) writes JSON lines prefixed ``DLLL``::

    DLLL {"timestamp": "...", "datetime": "...", "elapsedtime": 1.2, "type": "LOG",
          "step": [3], "data": {"hr@10": 0.95}}

plus ``"type": "METADATA"`` lines declaring units. No PyPI package provides ``dllogger``, so this
module writes the same format itself, and delegates to the real ``dllogger`` when it is importable
(as in NGC containers) so that tools reading DLE logs read ours.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

Step = str | int | tuple | list


def _step(step: Step) -> Any:
    if isinstance(step, tuple):
        return list(step)
    return step


class DLLogger:
    """Minimal DLLogger: ``log(step, data)``, ``metadata(name, meta)``, ``flush()``, ``close()``.

    Parameters
    ----------
    path
        JSON-lines file to append to, or None for no file.
    stdout
        Also print a short human-readable line per record.
    enabled
        False on non-zero ranks: every call is then a no-op.
    """

    def __init__(self, path: str | os.PathLike | None, stdout: bool = True, enabled: bool = True):
        self.enabled = enabled
        self.stdout = stdout
        self.start = time.time()
        self.path = Path(path) if path else None
        self._file: IO[str] | None = None
        self._real = None
        if not enabled:
            return
        real = _import_real()
        if real is not None:  # NGC containers: the real DLLogger writes the same format
            backends = [real.StdOutBackend(real.Verbosity.DEFAULT)] if stdout else []
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                backends.append(real.JSONStreamBackend(real.Verbosity.VERBOSE, str(self.path)))
            real.init(backends=backends)
            self._real = real
            return
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write("DLLL " + json.dumps(record, default=float) + "\n")

    def _record(self, kind: str, step: Step, data: dict) -> dict:
        now = time.time()
        return {
            "timestamp": f"{now}",
            "datetime": _dt.datetime.fromtimestamp(now).isoformat(),
            "elapsedtime": now - self.start,
            "type": kind,
            "step": _step(step),
            "data": data,
        }

    def log(self, step: Step, data: dict[str, Any]) -> None:
        """Log one record of ``data`` at ``step`` (``"PARAMETER"``, ``()``, an epoch, ...)."""
        if not self.enabled:
            return
        if self._real is not None:
            self._real.log(step=step, data=data)
            return
        self._write(self._record("LOG", step, data))
        if self.stdout:
            items = " ".join(f"{k}: {_fmt(v)}" for k, v in data.items())
            print(f"DLL {_step(step)} {items}", file=sys.stderr, flush=True)

    def metadata(self, name: str, meta: dict[str, Any]) -> None:
        """Declare the unit/format of metric ``name`` (a ``METADATA`` line)."""
        if not self.enabled:
            return
        if self._real is not None:
            self._real.metadata(name, meta)
            return
        rec = self._record("METADATA", [], {})
        del rec["step"], rec["data"]
        rec["metadata"] = {"name": name, **meta}
        self._write(rec)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        if self._real is not None:
            self._real.flush()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> DLLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _import_real() -> Any:
    if os.environ.get("NCF_NO_DLLOGGER"):
        return None
    try:
        import dllogger  # type: ignore[import-not-found]
    except ImportError:
        return None
    return dllogger


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def read_log(path: str | os.PathLike) -> list[dict]:
    """Parse a DLLogger JSON-lines file into its records (lines without ``DLLL`` are skipped)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("DLLL "):
            out.append(json.loads(line[5:]))
    return out
