"""Atomic writes leave the old target or the whole new one, never a mix, even when killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ncf.core import atomic, faults
from ncf.core.atomic import atomic_dir, clean_stale, owner_of, write_json, write_text


def test_write_json_roundtrip_and_no_temp_left(tmp_path):
    target = tmp_path / "sub" / "m.json"
    write_json(target, {"a": 1})
    write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["m.json"]


def test_atomic_dir_success_renames_into_place(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "f.txt").write_text("x")
        assert not target.exists()
    assert (target / "f.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_atomic_dir_failure_leaves_nothing(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(target) as tmp:
            (tmp / "half.txt").write_text("x")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_refuses_existing_unless_overwrite(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    with pytest.raises(FileExistsError, match="--force"):
        with atomic_dir(target):
            pass
    with pytest.raises(ValueError):
        with atomic_dir(target, overwrite=True) as tmp:
            (tmp / "new").write_text("new")
            raise ValueError("bad input")
    assert (target / "old").read_text() == "old"  # a failed overwrite keeps the old output
    with atomic_dir(target, overwrite=True) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["new"]


def test_clean_stale_removes_leftovers_of_killed_writer(tmp_path):
    (tmp_path / ".tmp-out-abc").mkdir()
    write_text(tmp_path / "keep.txt", "k")
    (tmp_path / ".tmp-out-file").write_text("partial")
    clean_stale(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


# Four file commits (f0..f3), then one directory commit (out/): a writer for the kill tests.
WRITER = """
import sys
from pathlib import Path
from ncf.core.atomic import atomic_dir, write_text
root = Path(sys.argv[1])
for i in range(4):
    write_text(root / f"f{i}.txt", "new")
with atomic_dir(root / "out", overwrite=True) as tmp:
    for name in ("a.txt", "b.txt"):
        (tmp / name).write_text("new")
"""
COMMITS = 5


def _old_outputs(root: Path) -> None:
    for i in range(4):
        (root / f"f{i}.txt").write_text("old")
    (root / "out").mkdir()
    for name in ("a.txt", "b.txt"):
        (root / "out" / name).write_text("old")


def _run_writer(root: Path, fault: str) -> int:
    env = {**os.environ, faults.ENV: fault}
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(root)], env=env, capture_output=True, timeout=60
    )
    return done.returncode


@pytest.mark.parametrize("n", range(1, COMMITS + 2))
def test_writer_killed_before_its_nth_commit_leaves_old_or_whole_new_outputs(tmp_path, n):
    _old_outputs(tmp_path)
    returncode = _run_writer(tmp_path, f"{faults.ATOMIC_COMMIT}:{n}")
    assert returncode == (0 if n > COMMITS else -signal.SIGKILL)
    files = [(tmp_path / f"f{i}.txt").read_text() for i in range(4)]
    assert files == ["new"] * min(n - 1, 4) + ["old"] * (4 - min(n - 1, 4))
    out = {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}
    want = "new" if n > COMMITS else "old"
    assert out == {"a.txt": want, "b.txt": want}
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert bool(leftovers) == (n <= COMMITS)  # the killed writer's temp file or directory
    for target in [*(f"f{i}.txt" for i in range(4)), "out"]:
        clean_stale(tmp_path / target)
    assert sorted(p.name for p in tmp_path.iterdir()) == [*(f"f{i}.txt" for i in range(4)), "out"]


def test_other_fault_points_do_not_stop_a_writer(tmp_path):
    _old_outputs(tmp_path)
    assert _run_writer(tmp_path, f"{faults.OPTIMIZER_STEP}:1") == 0
    assert (tmp_path / "out" / "a.txt").read_text() == "new"


@pytest.mark.parametrize("target_exists", [False, True])
def test_clean_stale_restores_a_parked_previous_output(tmp_path, target_exists):
    """The two-rename fallback parks the old directory; a writer killed there loses nothing."""
    parked = tmp_path / ".tmp-out-old-4242"
    parked.mkdir()
    (parked / "a.txt").write_text("old")
    if target_exists:  # killed after the new directory moved in: the parked one is garbage
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "a.txt").write_text("new")
    clean_stale(tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "a.txt").read_text() == ("new" if target_exists else "old")


def test_exchange_swaps_two_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "name").write_text(d.name)
    swapped = atomic._exchange(a, b)
    if sys.platform.startswith("linux"):
        assert swapped  # renameat2(RENAME_EXCHANGE): glibc >= 2.28 on ext4, xfs, btrfs, tmpfs
    if swapped:
        assert [(a / "name").read_text(), (b / "name").read_text()] == ["b", "a"]


def test_overwrite_without_exchange_uses_two_renames(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    target = tmp_path / "out"
    for text in ("first", "second"):
        with atomic_dir(target, overwrite=True) as tmp:
            (tmp / "v").write_text(text)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.read_text() for p in target.iterdir()] == ["second"]


def _write(target, owner, overwrite=False, inputs=()):
    with atomic_dir(target, overwrite=overwrite, owner=owner, inputs=inputs) as tmp:
        (tmp / "out.txt").write_text("new")


def test_an_owned_output_is_replaced_and_marked(tmp_path):
    target = tmp_path / "etl"
    _write(target, "etl")
    assert owner_of(target) == "etl"
    with pytest.raises(FileExistsError, match="pass --force"):
        _write(target, "etl")
    _write(target, "etl", overwrite=True)
    assert owner_of(target) == "etl" and (target / "out.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["etl"]  # nothing hidden left beside it


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda t: (t.mkdir(), (t / "ratings.csv").write_text("x")), r"a folder of 1 entries not written by this project \(ratings.csv\)"),
        (lambda t: t.write_text("x"), "is a file"),
        (lambda t: _write(t, "train"), "is an output of `ncf train`"),
    ],
)  # fmt: skip
def test_force_never_replaces_what_the_command_did_not_write(tmp_path, make, what):
    target = tmp_path / "out"
    make(target)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(FileExistsError, match=what):
        _write(target, "etl", overwrite=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # untouched, no temp left


def test_the_input_is_never_inside_what_is_replaced(tmp_path):
    target = tmp_path / "d"
    _write(target, "etl")
    (target / "ratings.csv").write_text("input")
    with pytest.raises(ValueError, match="lies inside"):
        _write(target, "etl", overwrite=True, inputs=(target / "ratings.csv",))
    assert (target / "ratings.csv").read_text() == "input"


def test_replacing_a_file_without_an_owner_leaves_no_hidden_sibling(tmp_path):
    target = tmp_path / "out"
    target.write_text("old file")
    with atomic_dir(target, overwrite=True) as tmp:
        (tmp / "a").write_text("new")
    assert (target / "a").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
