"""NCF_FAULT: parsed strictly, and it kills the process at exactly the N-th passage of its point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ncf.core import faults


@pytest.mark.parametrize(
    ("value", "plan"),
    [
        (None, None),
        ("", None),
        ("atomic_commit:3", ("atomic_commit", 3)),
        ("optimizer_step:1", ("optimizer_step", 1)),
    ],
)
def test_parse(value, plan):
    assert faults.parse(value) == plan


@pytest.mark.parametrize(
    "value", ["atomic_commit", "atomic_commit:0", "atomic_commit:-1", "optimizer:2", "x:y", ":3"]
)
def test_parse_rejects_bad_values_naming_the_variable(value):
    with pytest.raises(ValueError, match=f"{faults.ENV}=.*atomic_commit:3"):
        faults.parse(value)


# Passes 5 times through each point, printing before each passage.
COUNTER = """
from ncf.core import faults
for i in range(1, 6):
    print(i, flush=True)
    faults.hit(faults.OPTIMIZER_STEP)
    faults.hit(faults.ATOMIC_COMMIT)
"""


@pytest.mark.parametrize("n", [1, 3, 5])
def test_process_dies_at_the_nth_passage(n):
    env = {**os.environ, faults.ENV: f"{faults.OPTIMIZER_STEP}:{n}"}
    done = subprocess.run(
        [sys.executable, "-c", COUNTER], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == [str(i) for i in range(1, n + 1)]


def test_unset_variable_changes_nothing():
    env = {k: v for k, v in os.environ.items() if k != faults.ENV}
    done = subprocess.run(
        [sys.executable, "-c", COUNTER], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stdout.split() == ["1", "2", "3", "4", "5"]
