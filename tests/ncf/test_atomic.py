"""Atomic writes leave the old target or the whole new one, never a mix."""

from __future__ import annotations

import json

import pytest

from ncf.atomic import atomic_dir, clean_stale, write_json, write_text


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
