"""Typed stage configs: one dataclass per command, each setting one field, the CLI generated from it.

A setting is declared once, as a dataclass field made by :func:`setting` (or :func:`flag` for an
on/off switch): its default, its type (the annotation), its help text and its flag (``--name``
from the field name, plus an ``alias`` such as DLE's ``-b``). Its validation is the dataclass's
``check()``, which names the flag and the fix. The command line is generated from the dataclass by
simple-parsing (docs/ARCHITECTURE.md says why that library), and parse errors are one line.

Layers, each overriding the one before field by field: the dataclass defaults, the stage's own
base layer (``Config.base``: e.g. ``ncf train --preset``), a config file (``--config FILE``), then
the flags that were given. Every command writes its resolved config (``write_config``) into its
output, in the one file format every ``--config`` reads::

    {"format": "ncf-config/1", "stage": "train", "config": {field: value, ...}, "about": {...}}

``config`` may hold any subset of the stage's fields; ``about`` is free-form (``ncf tune`` records
its search there).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import simple_parsing
from simple_parsing.helpers.fields import flag as _sp_flag

from ncf.core import textfile
from ncf.core.atomic import write_json
from ncf.core.errors import report

FORMAT = "ncf-config/1"
# The format ``ncf tune`` wrote before every stage had a config (train settings only).
TRAIN_FORMAT_V0 = "ncf-train-config/1"
DEFAULT_SEED = 1  # the seed of every stage that draws at random

C = TypeVar("C", bound="Config")


def setting(default: Any = dataclasses.MISSING, *, help: str, alias: str | None = None, **kw: Any):
    """A config field: its default (or ``default_factory=``), help text and optional flag alias.

    Extra keywords (``choices``, ``metavar``, ``nargs``) go to argparse's ``add_argument``.
    """
    return simple_parsing.field(default=default, alias=alias, help=help, **kw)


def flag(default: bool, *, help: str, alias: str | None = None):
    """An on/off setting: ``--name`` turns it on, ``--no-name`` off."""
    return _sp_flag(default, negative_prefix="--no-", alias=alias, help=help)


def flag_name(field: str) -> str:
    """The command-line flag of a field: ``batch_size`` -> ``--batch-size``."""
    return "--" + field.replace("_", "-")


@dataclasses.dataclass
class Config:
    """Base of every stage config: ``check``, ``to_dict``, ``from_dict`` and the base layer."""

    # Fields read before the others (as ``--preset``) because they choose the base layer.
    PRE_FIELDS: ClassVar[tuple[str, ...]] = ()
    # Text after the flags in ``--help`` (rules, output layout); kept as written.
    EPILOG: ClassVar[str | None] = None

    def check(self) -> None:
        """Raise ValueError naming the flag of the first invalid value and the fix."""

    @classmethod
    def base(cls, chosen: dict[str, Any]) -> dict[str, Any]:
        """Values over the defaults chosen by ``PRE_FIELDS`` (``chosen``); none by default."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (paths as strings, nested configs as dicts)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls: type[C], values: dict[str, Any], where: str = "config") -> C:
        """An instance from JSON-like ``values`` over the defaults, each value type-checked."""
        return cls(**check_values(cls, values, where))

    def replace(self: C, **changes: Any) -> C:
        """A copy with ``changes`` applied (checked like a config file's values)."""
        return dataclasses.replace(self, **check_values(type(self), changes, "replace"))


def _plain(value: Any) -> Any:
    if isinstance(value, Config):
        return value.to_dict()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def check_values(cls: type[Config], values: dict[str, Any], where: str) -> dict[str, Any]:
    """``values`` converted to the field types of ``cls``; ValueError naming an unknown or
    mistyped setting."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for key, value in values.items():
        if key not in names:
            raise ValueError(f"{where}: unknown setting {key!r}; settings are {sorted(names)}")
        out[key] = _convert(hints[key], value, f"{where}: {key}={value!r}")
    return out


def _convert(hint: Any, value: Any, where: str) -> Any:
    """``value`` as type ``hint`` (JSON's ints pass as floats, strings as paths)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{where}: must be one of {list(args)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: must be a list")
        return [_convert(args[0] if args else Any, v, where) for v in value]
    if isinstance(hint, type) and issubclass(hint, Config):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{where}: must be an object of {hint.__name__} settings")
        return hint.from_dict(value, where)
    if hint is Any:
        return value
    if hint is float and type(value) is int:
        return float(value)
    if hint is Path and isinstance(value, (str, Path)):
        return Path(value)
    if type(value) is not hint:  # bool is not an int here
        raise ValueError(f"{where}: must be {getattr(hint, '__name__', hint)}")
    return value


def merge(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``under``; nested objects (sub-configs) merge key by key."""
    out = dict(under)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            value = merge(out[key], value)
        out[key] = value
    return out


def read_config(path: str | Path, stage: str) -> dict[str, Any]:
    """The ``config`` object of a config file for ``stage`` (not yet type-checked)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    try:
        doc = textfile.read_json(path)
    except ValueError as exc:
        raise ValueError(f"--config {exc}") from None
    formats = {FORMAT} | ({TRAIN_FORMAT_V0} if stage == "train" else set())
    if not isinstance(doc, dict) or doc.get("format") not in formats:
        raise ValueError(
            f'--config {path}: needs {{"format": "{FORMAT}", "stage": "{stage}", "config": {{..}}}}'
        )
    if doc.get("format") == FORMAT and doc.get("stage") != stage:
        raise ValueError(f"--config {path}: is the config of `ncf {doc.get('stage')}`, not {stage}")
    extra = sorted(set(doc) - {"format", "stage", "config", "about"})
    if extra or not isinstance(doc.get("config"), dict):
        raise ValueError(f'--config {path}: unknown keys {extra} or no "config" object')
    return doc["config"]


def write_config(path: str | Path, cfg: Config, stage: str, about: dict | None = None) -> Path:
    """Write ``cfg`` as a config file that ``ncf STAGE --config PATH`` reads (atomically)."""
    doc = {"format": FORMAT, "stage": stage, "config": cfg.to_dict(), "about": about or {}}
    write_json(path, doc)
    return Path(path)


class ParseError(ValueError):
    """A command line that does not parse (one line: the flag and what it takes)."""


class _Parser(simple_parsing.ArgumentParser):
    """simple-parsing's parser with argparse's usage-plus-message error turned into one line."""

    def error(self, message: str) -> typing.NoReturn:
        raise ParseError(message)


def _pre_parse(cls: type[Config], argv: Sequence[str]) -> tuple[Path | None, dict[str, Any]]:
    """``--config`` and the ``PRE_FIELDS`` given on the command line (the rest is left)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path)
    for name in cls.PRE_FIELDS:
        pre.add_argument(flag_name(name), dest=name)
    known, _ = pre.parse_known_args(list(argv))
    return known.config, {n: getattr(known, n) for n in cls.PRE_FIELDS if getattr(known, n)}


def resolve(cls: type[C], argv: Sequence[str], stage: str, prog: str | None = None) -> C:
    """The resolved config of ``stage`` from its command line (layers: module docstring).

    ``-h`` prints the generated help (with the resolved defaults) and exits 0; errors raise
    ValueError with one line.
    """
    path, chosen = _pre_parse(cls, argv)
    from_file = read_config(path, stage) if path is not None else {}
    chosen = {n: from_file[n] for n in cls.PRE_FIELDS if n in from_file} | chosen
    values = merge(merge(cls.base(chosen), from_file), chosen)
    where = f"--config {path}" if path is not None else "defaults"
    default = cls.from_dict(values, where)
    parser = _Parser(
        prog=prog or f"ncf {stage}",
        description=(cls.__doc__ or "").strip().splitlines()[0],
        epilog=cls.EPILOG,
        add_option_string_dash_variants=simple_parsing.DashVariant.DASH,
        add_config_path_arg=False,
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f'JSON settings under the flags ({{"format": "{FORMAT}", "stage": "{stage}", '
        '"config": {...}}; every command writes its resolved config in this format)',
    )
    parser.add_arguments(cls, dest="cfg", default=default)
    try:
        cfg = parser.parse_args(list(argv)).cfg
    except ParseError as exc:
        raise ParseError(f"{exc} (see `{parser.prog} --help`)") from None
    cfg.check()
    return cfg


def main_error(prog: str, exc: BaseException) -> int:
    """Print ``exc`` as the one line ``PROG: error: MESSAGE``; its exit code (``ncf.core.errors``:
    2 for bad input, 1 for an environment fault)."""
    return report(prog, exc)
