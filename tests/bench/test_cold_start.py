"""bench cold-start's `--candidates` settings: parsed as numbers, a bad one named in one line."""

import pytest

from ncf.bench import cold_start


@pytest.mark.parametrize(
    ("text", "want"),
    [("5,0.05,0.1,4", [5.0, 0.05, 0.1, 4.0]), ("0,1e-3,0,0", [0.0, 0.001, 0.0, 0.0])],
)
def test_candidate_settings_parse(text: str, want: list[float]) -> None:
    assert cold_start.parse_candidate(text) == want


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("5,0.05,0.1", "3 parts"),
        ("5,fast,0.1,4", "'fast' is not a number"),
        ("2.5,0.05,0.1,4", "whole STEPS"),
        ("5,0,0.1,4", "LR '0' must be > 0"),
        ("5,0.05,-1,4", "L2 >= 0"),
    ],
)
def test_a_bad_candidate_is_named(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        cold_start.ColdStartBench(candidates=[text]).check()
