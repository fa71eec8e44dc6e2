"""``metadata.json`` of an ETL output directory, input hashing, and the reuse decision."""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
from pathlib import Path
from typing import Any

from ncf.core.names import METADATA_FILE

# The version of metadata.json (outputs written before it existed have none, but a "fingerprint").
FORMAT = "ncf-etl/1"
# Options that change the output; --workers and --partitions do not (tests check they agree).
OUTPUT_OPTIONS = (
    "negatives", "min_ratings", "seed", "engine", "holdout", "ties", "columns", "negative_draw",
    "vocab_from", "cold_users",
)  # fmt: skip
# How the evaluation negatives are drawn: each user from its own stream (ncf.workflows.negatives).
NEGATIVE_DRAW = "per-user"
# What outputs written before an option existed were made with (their fingerprint lacks the key).
LEGACY_OPTIONS = {
    "holdout": "test",
    "ties": "item-id",
    "columns": None,
    "negative_draw": "one stream",
    "vocab_from": None,
    "cold_users": 0.0,
}
HOLDOUTS = ("valid,test", "test")
TIES = ("item-id", "file-order")
_PACKAGES = (
    "nvtabular",
    "merlin-core",
    "numpy",
    "pandas",
    "pyarrow",
    "dask",
    "distributed",
    "cudf-cu12",
    "cupy-cuda12x",
    "ncf-merlin",
)
SPLIT_RULE = (
    "leave-one-out by time: each user's latest interaction is the test item; ties on timestamp "
    "go to the larger raw movieId"
)
TIE_RULES = {
    "item-id": "ties on timestamp go to the larger raw movieId",
    "file-order": "ties on timestamp go to the later line of the input file",
}
DEDUP_RULE = "duplicate (userId, movieId) pairs keep only their latest rating (ties: later line)"
FILTER_ORDER = (
    "drop duplicate pairs, then users with fewer than min_ratings interactions, then split"
)
COLD_USERS_RULE = (
    "--cold-users: after de-duplication and before any filter, a user whose seeded hash of the "
    "raw id falls in the first `fraction` of its range is set apart with every rating: none is "
    "trained on, evaluated or in the vocabularies unless another user rated the item"
)
FIT_RULE = (
    "the Workflow (Categorify) is fitted on every kept rating, train and test: leave-one-out "
    "tests on users and items seen in training, and every test item needs a model id"
)
NEGATIVE_RULE = (
    "per test user, negatives_per_user distinct items drawn uniformly from the items the user "
    "never interacted with (train or test); row order within a user is the draw order; each "
    "user draws from its own stream, seeded by seed and its user_id"
)
VALID_NEGATIVE_RULE = (
    "negatives/ (test) and valid_negatives/ (valid) each hold negatives_per_user distinct items per "
    "user, drawn uniformly from the items the user never interacted with (train, valid or test), so "
    "neither holds the other split's held-out item; the two draws are independent (valid uses a "
    "seed derived from seed), and negatives/ is the draw --holdout test makes with the same seed; "
    "each user draws from its own stream, seeded by the split's seed and its user_id"
)


def split_rule(holdout: str, ties: str) -> str:
    """The ``rules.split`` text of ``metadata.json`` for ``--holdout`` and ``--ties``."""
    if holdout == "test" and ties == "item-id":
        return SPLIT_RULE  # the text of outputs written before --holdout/--ties existed
    held = (
        "the latest interaction is the test item and the latest of the rest the valid item"
        if holdout == "valid,test"
        else "the latest interaction is the test item"
    )
    return f"leave-last-out by time, per user: {held}; {TIE_RULES[ties]}"


def holdout_minimum(holdout: str) -> int:
    """Interactions a user needs for ``--holdout``: one per held-out split plus one to train on
    (``test`` keeps its historical minimum of 1: a user with one rating is a test-only user)."""
    return 3 if holdout == "valid,test" else 1


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape the output (those installed)."""
    out = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def fingerprint(options: dict[str, Any], input_sha256: str) -> dict[str, Any]:
    """What must match for an existing output to be reused: input hash and output options."""
    return {"input_sha256": input_sha256, **{k: options[k] for k in OUTPUT_OPTIONS}}


def read_metadata(out: Path) -> dict[str, Any] | None:
    """The metadata of an existing output directory, or None if absent or unreadable."""
    try:
        return json.loads((out / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_etl_output(out: Path) -> bool:
    """True if ``out`` is an ETL output by its ``metadata.json`` (an ``ncf-etl/*`` format, or,
    written before that field existed, a ``fingerprint``): one ``ncf etl --force`` may replace."""
    meta = read_metadata(out)
    if not isinstance(meta, dict):
        return False
    return str(meta.get("format", "")).startswith("ncf-etl/") or "fingerprint" in meta


def reuse_differences(meta: dict[str, Any] | None, wanted: dict[str, Any]) -> list[str]:
    """Why an existing output cannot be reused (empty list: it can)."""
    if meta is None:
        return [f"no readable {METADATA_FILE}"]
    have = {**LEGACY_OPTIONS, **meta.get("fingerprint", {})}
    return [f"{k}: {have.get(k)!r} != {v!r}" for k, v in wanted.items() if have.get(k) != v]


VOCAB_RULE = (
    "each vocab file holds the raw ids (column vocab_columns[kind]) in model-id order; its pandas "
    "index is the model id (first_id + row number); ids below first_id are reserved"
)


def vocab_metadata(
    files: dict[str, Path], out: Path, columns: dict[str, str], first: dict[str, int]
) -> dict:
    """The ``vocab`` keys of ``metadata.json``: where serving finds each raw -> model id table."""
    return {
        "vocab": {k: str(p.relative_to(out)) for k, p in files.items()},
        "vocab_columns": columns,
        "vocab_first_id": first,
        "vocab_rule": VOCAB_RULE,
    }
