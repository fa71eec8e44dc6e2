"""Command-line options to objects: one rule for every stage, so that no stage restates its flags.

A flag's ``dest`` is the name of the parameter it sets (``--min-ratings`` -> ``min_ratings``).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def call_with_args(target: Callable[..., T], args: argparse.Namespace, **given: Any) -> T:
    """Call ``target`` (a function or a dataclass) with each parsed flag named like one of its
    parameters, plus ``given`` (which wins over a flag of the same name)."""
    params = inspect.signature(target).parameters
    kwargs = {n: getattr(args, n) for n in params if n not in given and hasattr(args, n)}
    return target(**kwargs, **given)
