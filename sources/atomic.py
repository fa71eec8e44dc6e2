"""``ncf convert``: a RecBole atomic interaction file (``.inter``) as a MovieLens ``ratings.csv``.

RecBole's atomic files are tab-separated with a ``name:type`` header (docs/FACTS.md, "RecBole
atomic files"); its datasets, ML-100K among them, come in this format. The user and item columns
must hold integer tokens (MovieLens ids); rating and timestamp are numbers. The output has the
columns of ``ratings.csv`` (``ncf.core.names.RAW_COLUMNS``) in the file's row order (so ``ncf etl
--ties file-order`` sees the same order) and is written atomically, the resolved config of the
command beside it (``ratings.config.json``, as ``ncf synth`` records its own).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ncf.core import atomic, names, textfile
from ncf.core.config import Config, flag, setting, write_config
from ncf.sources.synth import config_path

# ratings.csv column -> the atomic field it comes from, by the names RecBole's MovieLens files use.
FIELDS = {
    names.RAW_USER: "user_id",
    names.RAW_ITEM: "item_id",
    names.RAW_RATING: "rating",
    names.RAW_TIME: "timestamp",
}


def _columns(path: Path, header: str) -> dict[str, str]:
    """``name -> name:type`` of the header; a clear error if a needed field is missing."""
    fields = {f.split(":", 1)[0]: f for f in header.rstrip("\r\n").split("\t")}
    missing = [f for f in FIELDS.values() if f not in fields]
    if missing:
        raise ValueError(
            f"{path}: header {header.strip()!r} lacks {missing}; an atomic .inter file needs the "
            f"tab-separated fields {[f + ':<type>' for f in FIELDS.values()]}"
        )
    return fields


def _numbers(path: Path, frame: pd.DataFrame, column: str, integer: bool) -> np.ndarray:
    """``column`` as int64 (``integer``) or float64; the first bad line is named in the error."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() | ((values != np.floor(values)) if integer else False)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        kind = "an integer (a MovieLens id or Unix time)" if integer else "a number"
        raise ValueError(
            f"{path}: line {row + 2}, column {column!r}: {frame[column].iloc[row]!r} is not {kind}"
        )
    return values.to_numpy(np.int64 if integer else np.float64)


def convert(inter: str | Path, out: str | Path) -> int:
    """Write ``inter`` (RecBole atomic) as ``out`` (ratings.csv); the number of rows written."""
    inter, out = Path(inter), Path(out)
    header, _, body = textfile.read_text(inter).partition("\n")
    fields = _columns(inter, header + "\n")
    frame = pd.read_csv(io.StringIO(body), sep="\t", header=None, dtype=str,
                        names=list(fields), keep_default_na=False)  # fmt: skip
    ratings = pd.DataFrame(
        {
            column: _numbers(inter, frame, field, integer=column != names.RAW_RATING)
            for column, field in FIELDS.items()
        }
    )
    atomic.write_text(out, ratings.to_csv(index=False))
    return len(ratings)


@dataclass
class ConvertConfig(Config):
    """A RecBole atomic .inter file (e.g. ML-100K) as ratings.csv (`ncf convert`)."""

    input: Path | None = setting(
        None,
        help="RecBole atomic interaction file (.inter; required)",
        positional=True,
        nargs="?",
        metavar="INPUT",
    )
    out: Path | None = setting(
        None, help="ratings.csv to write, or a directory to hold ratings.csv (required)"
    )
    force: bool = flag(False, help="replace an output file that `ncf convert` wrote before")

    def check(self) -> None:
        """Raise ValueError naming a missing setting."""
        if self.input is None:
            raise ValueError("INPUT: required (`ncf convert ml-100k.inter --out ratings.csv`)")
        if self.out is None:
            raise ValueError("--out: required (see `ncf convert --help`)")


CONFIG = ConvertConfig


def run(cfg: ConvertConfig) -> int:
    """Convert; record the resolved config beside the output (``ratings.config.json``)."""
    out = cfg.out / "ratings.csv" if cfg.out.is_dir() else cfg.out
    atomic.check_file_replaceable(out, "convert", cfg.force, config_path(out), (cfg.input,))
    rows = convert(cfg.input, out)
    write_config(config_path(out), cfg, "convert")
    print(f"ncf convert: {rows:,} ratings -> {out}")
    return 0
