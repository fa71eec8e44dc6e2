"""ncf.core.options.call_with_args: flags reach the parameters of the same name, and only those."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from ncf.core.options import call_with_args


@dataclass
class _Opts:
    input: str
    min_ratings: int = 20
    seed: int = 0


def _flags(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--min-ratings", type=int, default=5)
    p.add_argument("--verbose", action="store_true")  # no such parameter: not passed
    return p.parse_args(argv)


def test_flags_fill_the_parameters_of_their_name():
    assert call_with_args(_Opts, _flags("--input", "r.csv", "--min-ratings", "3")) == _Opts(
        "r.csv", 3, 0
    )


def test_given_values_win_and_functions_work_too():
    def f(input: str, seed: int = 0) -> tuple[str, int]:
        return input, seed

    assert call_with_args(f, _flags("--input", "a"), seed=7) == ("a", 7)
    assert call_with_args(_Opts, _flags("--input", "a"), input="b").input == "b"


def test_a_missing_required_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="input"):
        call_with_args(_Opts, argparse.Namespace(seed=1))
