"""Which input columns hold the user, the item, the time and the rating (``ncf etl --columns``).

MovieLens names them ``userId``, ``movieId``, ``timestamp`` and ``rating`` (the default). Other
data names its own: ``--columns user=uid,item=iid,time=ts`` reads those columns of a CSV header
or a parquet schema instead. Every row is one positive interaction, so the rating's value is
never used: it is checked (0.5 to 5, MovieLens's scale) only under the MovieLens names, where a
CSV must have it and a parquet file may; with ``--columns`` no rating is read.
"""

from __future__ import annotations

import dataclasses

from ncf.core.names import RAW_COLUMNS, RAW_ITEM, RAW_RATING, RAW_TIME, RAW_USER

ROLES = {"user": RAW_USER, "item": RAW_ITEM, "rating": RAW_RATING, "time": RAW_TIME}
REQUIRED = ("user", "item", "time")  # what --columns names


@dataclasses.dataclass(frozen=True)
class ColumnMap:
    """Input column name of each role (``rating`` None: not read)."""

    user: str = RAW_USER
    item: str = RAW_ITEM
    time: str = RAW_TIME
    rating: str | None = RAW_RATING

    @property
    def is_default(self) -> bool:
        return self == ColumnMap()

    def name(self, raw: str) -> str | None:
        """The input's name for the role whose MovieLens name is ``raw`` (``RAW_USER`` ...)."""
        role = next(r for r, n in ROLES.items() if n == raw)
        return getattr(self, role)

    def read(self) -> list[str]:
        """The input columns to read, in MovieLens's order (user, item, rating, time)."""
        return [n for n in (self.name(raw) for raw in RAW_COLUMNS) if n is not None]

    def labels(self) -> dict[str, str]:
        """MovieLens name -> the input's name, for messages about the input's columns."""
        return {raw: n for raw in RAW_COLUMNS if (n := self.name(raw)) is not None}

    def header(self) -> str:
        """The header line these names make (for messages: what was expected)."""
        return ",".join(self.read())


def parse_columns(spec: str | None) -> ColumnMap:
    """``user=uid,item=iid,time=ts[,rating=r]`` as a :class:`ColumnMap`; None: the default.

    Raises
    ------
    ValueError
        Naming the malformed or missing part and the expected form.
    """
    if spec is None:
        return ColumnMap()
    form = "--columns user=NAME,item=NAME,time=NAME"
    values: dict[str, str] = {}
    for part in spec.split(","):
        role, sep, name = (s.strip() for s in part.partition("="))
        if not sep or role not in REQUIRED or not name:
            raise ValueError(f"--columns {spec!r}: {part!r} is not ROLE=NAME; expected {form}")
        if role in values:
            raise ValueError(f"--columns {spec!r}: {role} given twice; expected {form}")
        values[role] = name
    missing = [r for r in REQUIRED if r not in values]
    if missing:
        raise ValueError(f"--columns {spec!r}: no {', '.join(missing)}; expected {form}")
    names = list(values.values())
    if len(set(names)) < len(names):
        raise ValueError(f"--columns {spec!r}: one column for two roles; expected {form}")
    return ColumnMap(rating=None, **values)
