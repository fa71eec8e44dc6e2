"""Suite-wide settings: property tests draw the same examples on every run (derandomized), and the
suite refuses to test another checkout's code."""

from pathlib import Path

from hypothesis import settings

import ncf.models
import ncf.serving

settings.register_profile("ncf", derandomize=True, database=None)
settings.load_profile("ncf")

ROOT = Path(__file__).resolve().parents[1]
# ncf.<stage> is mapped onto this checkout's top-level folders by the editable install
# (pyproject's package-dir); a venv made in another checkout maps them onto that one's.
for _stage in (ncf.models, ncf.serving):
    if ROOT not in Path(_stage.__file__).resolve().parents:
        raise RuntimeError(
            f"{_stage.__name__} is imported from {_stage.__file__}, not from this checkout "
            f"({ROOT}): the venv belongs to another checkout; run `make venv` here"
        )
