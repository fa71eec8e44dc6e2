"""`ncf train --out R`: what --force and --resume do with each state a kill (or a user) can leave R
in. --force clears only a run folder's own outputs; --resume never discards a finished epoch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ncf.core.config import write_config
from ncf.models import checkpoint, train
from ncf.models.trainer import LOG_FILE, METRICS_FILE
from tests.models.conftest import FAST, parse

ARGS = [*FAST, "--epochs", "1"]


def _train(etl_dir: Path, out: Path, *extra: str) -> int:
    return train.run(parse(train, ["--data", etl_dir, "--out", out, *ARGS, *extra]))


@pytest.fixture(scope="module")
def finished(etl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch run: config.json, best.pt, last.pt, checkpoints.json, logs."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert _train(etl_dir, out) == 0
    return out


def _state(finished: Path, tmp_path: Path, state: str) -> Path:
    """A copy of the finished run as a kill (or a disk fault) can leave it."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    if state in ("no-checkpoint", "only-last"):
        (run / checkpoint.BEST).unlink()
    if state in ("no-checkpoint", "only-best"):
        (run / checkpoint.LAST).unlink()
    if state == "no-checkpoint":  # killed after config.json, before the first checkpoint
        for name in (checkpoint.MANIFEST, LOG_FILE, METRICS_FILE, train.PLOT_FILE):
            (run / name).unlink(missing_ok=True)
    if state.startswith("truncated"):
        data = (run / checkpoint.LAST).read_bytes()
        (run / checkpoint.LAST).write_bytes(data[: len(data) // 2])
    if state == "truncated-only-last":
        (run / checkpoint.BEST).unlink()
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir())}


@pytest.mark.parametrize(
    "state, resumes",
    [("no-checkpoint", "fresh"), ("only-last", "last"), ("both", "last"),
     ("only-best", None), ("truncated-last", None), ("truncated-only-last", None)],
)  # fmt: skip
def test_resume_in_each_state_a_kill_can_leave(etl_dir, finished, tmp_path, state, resumes):
    run = _state(finished, tmp_path, state)
    before = _snapshot(run)
    if resumes is None:  # a finished epoch and no usable last.pt: refused, nothing touched
        with pytest.raises(ValueError, match="--resume: .*nothing was changed: pass --force"):
            _train(etl_dir, run, "--resume")
        assert _snapshot(run) == before
        assert _train(etl_dir, run, "--force") == 0  # what the message says starts over
    else:
        assert _train(etl_dir, run, "--epochs", "2", "--resume") == 0
    last = torch.load(run / checkpoint.LAST, weights_only=True)
    history = [h["epoch"] for h in last["history"]]
    assert history == {"fresh": [0, 1], "last": [0, 1], None: [0]}[resumes]
    assert not [p for p in run.iterdir() if p.name.startswith(".tmp-")]


def test_only_best_message_names_the_files_and_the_way_on(etl_dir, finished, tmp_path):
    run = _state(finished, tmp_path, "only-best")
    with pytest.raises(ValueError) as err:
        _train(etl_dir, run, "--resume")
    message = str(err.value)
    assert f"{run / 'last.pt'} is missing" in message and "best.pt (epoch 0)" in message
    assert "new --out" in message and "\n" not in message


@pytest.mark.parametrize("extra", [[], ["--force"], ["--resume"]])
def test_a_folder_train_did_not_write_is_refused(etl_dir, tmp_path, extra):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    (out / "log.json").write_text("my own log")  # a name train writes: still not its run
    with pytest.raises(FileExistsError, match=r"not written by this project \(log.json, notes"):
        _train(etl_dir, out, *extra)
    assert _snapshot(out) == {"log.json": b"my own log", "notes.txt": b"keep"}
    etl_out = tmp_path / "etl"
    etl_out.mkdir()
    write_config(etl_out / train.CONFIG_FILE, train.TrainRunConfig(), "etl")  # another stage's
    with pytest.raises(FileExistsError, match="replaces only its own output"):
        _train(etl_dir, etl_out, *extra)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        _train(etl_dir, a_file, *extra)


def test_force_keeps_other_files_of_a_run_folder_and_an_empty_folder_is_used(etl_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _train(etl_dir, empty) == 0
    (empty / "notes.txt").write_text("keep")
    assert _train(etl_dir, empty, "--force") == 0
    assert (empty / "notes.txt").read_text() == "keep"
